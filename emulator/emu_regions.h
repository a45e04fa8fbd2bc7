/*
 * emu_regions.h - cosmolite's simulated Azure regions (--regions, issue 15
 * behaviour 5; docs/azure-regions.md).
 *
 * One process serves every region on its own address, all over the one
 * store: a region is an address plus a name, and exactly one region is the
 * write region. GET / in any region lists the write region in
 * writableLocations and every region (write region first, as Azure orders
 * them by failover priority) in readableLocations; a write sent to another
 * region answers 403 sub-status 3 (WriteForbidden), which is what makes the
 * SDKs re-read GET / and follow a failover. Since the regions share the
 * store, an acknowledged write is never lost by a failover.
 *
 * Thread-safety: after emu_regions_set_port (start-up, before serving), every
 * function may be called from any thread; the write region and the counters
 * are atomics.
 */
#ifndef EMU_REGIONS_H
#define EMU_REGIONS_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_buf.h"
#include "common/sf_err.h"

/* Most regions one --regions may list (Azure accounts rarely span more). */
#define EMU_REGIONS_MAX 16
/* Longest region name, in bytes ("West Europe", "South Central US", ...). */
#define EMU_REGION_NAME_MAX 63

struct emu_regions;

/*
 * Parses "NAME=HOST:PORT,NAME=HOST:PORT,..." (at least one region; HOST an
 * IPv4 address or name, or [IPV6]; PORT 0..65535, 0 = ephemeral). Names are
 * 1..EMU_REGION_NAME_MAX printable bytes without ',' or '=', unique once
 * spaces are dropped and case is folded (the SDKs compare them that way);
 * addresses are unique. The first region is the write region.
 * *ret_regions is new (emu_regions_free). SF_EINVAL with a message naming the
 * offending entry.
 */
enum sf_rc emu_regions_parse(const char *spec, struct emu_regions **ret_regions,
                             struct sf_err *err);
/* NULL is a no-op. */
void emu_regions_free(struct emu_regions *g);

int emu_regions_count(const struct emu_regions *g);
/* Borrowed, valid until emu_regions_free. */
const char *emu_regions_name(const struct emu_regions *g, int i);
const char *emu_regions_host(const struct emu_regions *g, int i);
int emu_regions_port(const struct emu_regions *g, int i);

/*
 * Records the port region i is really bound to (resolves port 0) and the
 * scheme, so the locations advertise reachable URLs. Start-up only.
 */
void emu_regions_set_port(struct emu_regions *g, int i, int port, bool tls);

/* Index of the current write region. */
int emu_regions_write_index(const struct emu_regions *g);

/*
 * Moves the write region to the region named `name` (compared as the SDKs
 * do: spaces dropped, case folded). Failing over to the current write region
 * is fine and changes nothing. SF_ENOTFOUND naming the known regions.
 */
enum sf_rc emu_regions_failover(struct emu_regions *g, const char *name, struct sf_err *err);

/*
 * Counts one request served by region i; refused = it was a write answered
 * 403/3. For GET /_admin/regions.
 */
void emu_regions_count_request(struct emu_regions *g, int i, bool refused);

/*
 * The account's location lists as Azure's GET / has them: writable = the
 * write region only, readable = every region, write region first. Each entry
 * is {"name":..,"databaseAccountEndpoint":"http://host:port/"}. New
 * reference; NULL when out of memory.
 */
json_t *emu_regions_locations(const struct emu_regions *g, bool writable);

/*
 * Appends {"writeRegion":..,"regions":[{"name","endpoint","isWriteRegion",
 * "requests","writesRefused"}]} to out: what GET /_admin/regions and
 * POST /_admin/failover answer.
 */
enum sf_rc emu_regions_dump(const struct emu_regions *g, struct sf_buf *out);

#endif
