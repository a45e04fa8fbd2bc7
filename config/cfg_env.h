/*
 * cfg_env.h - settings from the environment (internal to config/).
 *
 * Containers and systemd units configure through the environment: every
 * variable SAGAFEED_<GROUP>_<KEY> (non-empty) sets the scalar setting
 * <group>.<key> of the loaded file, lower-cased, before validation - e.g.
 *   SAGAFEED_COSMOS_ENDPOINT=https://cosmos:8081/   cosmos.endpoint
 *   SAGAFEED_COSMOS_KEY_ENV=COSMOS_KEY              cosmos.key_env
 *   SAGAFEED_KAFKA_BROKERS=kafka:9092               kafka.brokers
 *   SAGAFEED_PROCESSOR_HTTP_LISTEN=:9464            processor.http_listen
 *   SAGAFEED_FEED_INSTANCE=worker-1                 feed.instance
 * The settings of the table (cfg.h, cfg_settings.c) are found by their whole
 * name and take the table's type (a number must be a whole number, a
 * duration or size may be text like "5s" or "16m", a boolean true/false).
 * Any other name is split: GROUP is the first word after SAGAFEED_, KEY the
 * rest; it replaces the file's setting keeping its type, or is a whole
 * number when it looks like one, a boolean for true/false, else a string
 * (and then an unknown key to the loader). A group the file lacks is created. Lists, arrays and
 * groups cannot be replaced. Secrets stay out of the file and the environment alike: cosmos.key set
 * this way is refused like an inline key (name the variable that holds it
 * with SAGAFEED_COSMOS_KEY_ENV instead). Settings set from the environment
 * have no line: every diagnostic about one (or about a group the environment
 * created) reads "environment:0: SAGAFEED_...: ...", never a line of the file.
 */
#ifndef CFG_ENV_H
#define CFG_ENV_H

#include <libconfig.h>

#include "config/cfg.h"

#define CFG_ENV_PREFIX "SAGAFEED_"

/*
 * Applies the SAGAFEED_* variables of env (a NULL-terminated "NAME=value"
 * list, normally environ) to the tree lc. Problems go to diags as
 * "environment:0: SAGAFEED_...: what is wrong".
 */
void cfg_env_apply(config_t *lc, char *const *env, struct cfg_diags *diags);

/*
 * The name of the variable that set s ("SAGAFEED_COSMOS_KEY_ENV"), or NULL
 * when s comes from the file. Borrowed: valid while lc holds s.
 */
const char *cfg_env_origin(const config_setting_t *s);

#endif
