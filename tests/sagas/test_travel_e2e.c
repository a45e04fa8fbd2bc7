/*
 * test_travel_e2e.c - end-to-end: the travel booking workflow
 * (config/examples/travel-booking.cfg: `delete` undos, a `when` on the car
 * step, a templated patch path, an `await` with a timeout, a workflow
 * `deadline`) run by the real
 * `sagafeed` binary against a real cosmolite while `kill -9` hits sagafeed.
 *
 *   travel_kill9  240 bookings (a third without a car, some seats asked for
 *                 twice, wallets too small for every booking of their
 *                 customer, rooms for half of them, one in twelve written
 *                 with a deadline already passed, one in seven never
 *                 confirmed by the "payment provider", the others confirmed
 *                 before or after their saga starts waiting), five kill -9s
 *                 while they run. Afterwards: every booking settled; seats, rooms,
 *                 holds, cars and wallets conserved exactly against the
 *                 confirmed bookings; every do-marker of a cancelled booking
 *                 undone once; no marker of a skipped car step; each
 *                 booking's transition events exactly once; every passed
 *                 deadline honoured once (reason "deadline exceeded",
 *                 nothing held); every wait ended once: confirmed with its
 *                 await marker, or timed out (3 s here) and refunded; no
 *                 saga left waiting.
 *   travel_timers_two_instances  180 bookings none of which is ever confirmed,
 *                 on two sagafeed instances sharing 4 ranges: every wait times
 *                 out (2 s) and each due saga is woken once across both
 *                 instances - the "woke N" lines of their logs add up to the
 *                 bookings a timer woke (issue 24: 300-490 for 132).
 */
#include "common/sf_base.h"

#include <check.h>
#include <signal.h>
#include <unistd.h>

#include "common/sf_json.h"
#include "common/sf_time.h"
#include "cosmos/cosmos.h"
#include "tests/support/e2e.h"

#define DB        "travel"
#define BOOKINGS  240
#define CUSTOMERS 24
#define HOTELS    4
#define ROOMS     30 /* per hotel: 120 rooms for 240 bookings */
#define BALANCE   1000
#define SEATS_DUP 12 /* the last bookings ask for seats earlier ones asked for */

struct booking_spec {
    char id[24], cust[24], flight[24], seat[24], hotel[24];
    bool car, expired, unconfirmed;
    int total;
};

/* The number in "b-017". */
static int atoi_id(const char *id)
{
    long v = 0;

    for (const char *p = id; *p != '\0'; p++)
        if (*p >= '0' && *p <= '9')
            v = v * 10 + (*p - '0');
    return (int)v;
}

static void spec_of(int i, struct booking_spec *b)
{
    int seat = i < BOOKINGS - SEATS_DUP ? i : i - (BOOKINGS - SEATS_DUP);

    (void)snprintf(b->id, sizeof(b->id), "b-%03d", i);
    (void)snprintf(b->cust, sizeof(b->cust), "c-%02d", i % CUSTOMERS);
    (void)snprintf(b->flight, sizeof(b->flight), "F%d", seat % 2);
    (void)snprintf(b->seat, sizeof(b->seat), "S%03d", seat);
    (void)snprintf(b->hotel, sizeof(b->hotel), "h-%d", i % HOTELS);
    b->car = i % 3 != 0;
    b->expired = i % 12 == 5;
    b->unconfirmed = i % 7 == 3;
    b->total = 100 + (i % 5) * 50;
}

/*
 * The database and containers of travel-booking.cfg (TTL on, as run needs),
 * HOTELS hotels of ROOMS rooms and CUSTOMERS wallets holding balance each.
 */
static void travel_seed(struct cosmos_client *cli, int balance)
{
    static const char *const colls[][2] = {
        {"bookings", "/customerId"}, {"seats", "/flight"},       {"hotels", "/hotel"},
        {"cars", "/city"},           {"wallets", "/customerId"}, {"confirmations", "/bookingId"}};
    struct sf_err err;

    sf_err_clear(&err);
    ck_assert_int_eq(cosmos_db_create_if_missing(cli, DB, NULL, NULL, &err), SF_OK);
    for (size_t c = 0; c < SF_ARRAY_LEN(colls); c++) {
        struct cosmos_container_def def = {
            .id = colls[c][0], .pk_path = colls[c][1], .default_ttl = -1};

        ck_assert_int_eq(cosmos_container_create_if_missing(cli, DB, &def, NULL, NULL, &err),
                         SF_OK);
    }
    for (int k = 0; k < HOTELS; k++) {
        char body[160], id[24];

        (void)snprintf(id, sizeof(id), "h-%d", k);
        (void)snprintf(body, sizeof(body),
                       "{\"id\":\"%s\",\"hotel\":\"%s\",\"rooms\":%d,\"holds\":{}}", id, id, ROOMS);
        e2e_create_doc(cli, DB, "hotels", id, body);
    }
    for (int k = 0; k < CUSTOMERS; k++) {
        char body[160], id[24];

        (void)snprintf(id, sizeof(id), "c-%02d", k);
        (void)snprintf(body, sizeof(body), "{\"id\":\"%s\",\"customerId\":\"%s\",\"balance\":%d}",
                       id, id, balance);
        e2e_create_doc(cli, DB, "wallets", id, body);
    }
}

static void write_booking(struct cosmos_client *cli, int i)
{
    struct booking_spec b;
    char body[1024], car[128] = "", dl[64] = "";

    spec_of(i, &b);
    if (b.car)
        (void)snprintf(car, sizeof(car), ",\"car\":{\"city\":\"city-%d\",\"class\":\"compact\"}",
                       i % 3);
    if (b.expired)
        (void)snprintf(dl, sizeof(dl), ",\"sfDeadline\":1");
    (void)snprintf(body, sizeof(body),
                   "{\"id\":\"%s\",\"type\":\"booking\",\"customerId\":\"%s\",\"status\":"
                   "\"requested\",\"flight\":\"%s\",\"seat\":\"%s\",\"hotel\":\"%s\",\"day\":"
                   "\"2026-12-%02d\",\"total\":%d%s%s}",
                   b.id, b.cust, b.flight, b.seat, b.hotel, 1 + i % 28, b.total, car, dl);
    e2e_create_doc(cli, DB, "bookings", b.cust, body);
}

/* The payment provider's confirmation of booking i (none for the unconfirmed ones). */
static void write_confirmation(struct cosmos_client *cli, int i)
{
    struct booking_spec b;
    char body[256];

    spec_of(i, &b);
    if (b.unconfirmed)
        return;
    (void)snprintf(body, sizeof(body), "{\"id\":\"conf-%s\",\"bookingId\":\"%s\",\"amount\":%d}",
                   b.id, b.id, b.total);
    e2e_create_doc(cli, DB, "confirmations", b.id, body);
}

/* The number of settled bookings (confirmed or cancelled); the confirmed ones in *ret_confirmed. */
static int count_settled(struct cosmos_client *cli, int *ret_confirmed)
{
    json_t *all =
        e2e_query_all(cli, DB, "bookings", "SELECT c.id, c.status FROM c WHERE c.type = 'booking'");
    json_t *d;
    size_t i;
    int settled = 0, confirmed = 0;

    json_array_foreach(all, i, d)
    {
        const char *s = sf_json_str(d, "status");

        if (s != NULL && strcmp(s, "confirmed") == 0)
            confirmed++;
        if (s != NULL && (strcmp(s, "confirmed") == 0 || strcmp(s, "cancelled") == 0))
            settled++;
    }
    json_decref(all);
    *ret_confirmed = confirmed;
    return settled;
}

/* The number of markers of saga `id` in phase, over every effect container. */
static int markers_of(json_t *const *markers, size_t n, const char *id, const char *phase,
                      const char *step)
{
    int k = 0;

    for (size_t c = 0; c < n; c++) {
        json_t *m;
        size_t i;

        json_array_foreach(markers[c], i, m)
        {
            if (strcmp(sf_json_str(m, "sagaId"), id) == 0 &&
                strcmp(sf_json_str(m, "phase"), phase) == 0 &&
                (step == NULL || strcmp(sf_json_str(m, "step"), step) == 0))
                k++;
        }
    }
    return k;
}

START_TEST(test_travel_kill9)
{
    static const char *const effect_colls[] = {"seats", "hotels", "cars", "wallets",
                                               "confirmations"};
    static const char *const edits[] = {"timeout = \"30s\"", "timeout = \"3s\"",
                                        "not confirmed within 30s", "not confirmed within 3s",
                                        NULL};
    struct harness_cosmolite_opts ho = {.memory = true, .partitions = 2};
    struct harness_cosmolite *h = NULL;
    struct cosmos_client *cli;
    struct sf_err err;
    char cfg[512], log[512];
    const char *args[] = {"run", "-c", cfg, "--instance", "travel-1", "--log-level", "warn", NULL};
    uint64_t rng = (uint64_t)sf_mono_us() | 1;
    json_t *bookings, *seats, *hotels, *cars, *wallets, *events, *markers[5], *d;
    long long rooms = 0, holds = 0, balance = 0, paid = 0;
    int kills = 0, settled = 0, confirmed = 0, cancelled = 0, expired = 0, skipped_cars = 0;
    int timed_out = 0;
    int64_t t0 = sf_mono_ms(), until;
    size_t i;
    pid_t pid;

    ck_assert_msg(harness_cosmolite_start(&ho, &h, &err) == SF_OK, "%s", err.msg);
    cli = e2e_client(h);
    travel_seed(cli, BALANCE);
    e2e_make_config(cfg, sizeof(cfg),
                    &(const struct e2e_config){
                        .name = "travel",
                        .endpoint = harness_cosmolite_endpoint(h),
                        .db = DB,
                        .example = "travel-booking.cfg",
                        .edits = edits,
                        .extra =
                            "processor = { workers = 8; max_attempts = 20; backoff_base = "
                            "\"10ms\"; backoff_cap = \"500ms\"; timer_interval = \"200ms\"; };"});
    (void)snprintf(log, sizeof(log), "%s/travel-sagafeed.log", e2e_tmp);
    pid = e2e_spawn(harness_cosmolite_key(h), log, args);
    /* Bookings arrive in five waves; after each, sagafeed dies at a random moment. */
    for (int wave = 0; wave < 5; wave++) {
        for (int k = wave * (BOOKINGS / 5); k < (wave + 1) * (BOOKINGS / 5); k++)
            write_booking(cli, k);
        /* the previous wave's confirmations: some sagas wait already, some not yet */
        for (int k = (wave - 1) * (BOOKINGS / 5); wave > 0 && k < wave * (BOOKINGS / 5); k++)
            write_confirmation(cli, k);
        sf_sleep_ms(150 + (int64_t)(sf_rand_next(&rng) % 900));
        ck_assert_int_eq(kill(pid, SIGKILL), 0);
        ck_assert_int_eq(e2e_wait_exit(pid, 10000), 128 + SIGKILL);
        kills++;
        pid = e2e_spawn(harness_cosmolite_key(h), log, args);
    }
    for (int k = 4 * (BOOKINGS / 5); k < BOOKINGS; k++)
        write_confirmation(cli, k);
    until = sf_mono_ms() + 150000;
    while (sf_mono_ms() < until && (settled = count_settled(cli, &confirmed)) < BOOKINGS)
        sf_sleep_ms(200);
    if (settled < BOOKINGS)
        e2e_dump_log(log);
    ck_assert_int_eq(settled, BOOKINGS);
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    ck_assert_int_eq(e2e_wait_exit(pid, 30000), 0);
    confirmed = 0; /* counted again below, booking by booking */

    bookings = e2e_query_all(cli, DB, "bookings", "SELECT * FROM c WHERE c.type = 'booking'");
    events = e2e_query_all(cli, DB, "bookings", "SELECT * FROM c WHERE c.sfKind = 'event'");
    seats = e2e_query_all(cli, DB, "seats", "SELECT * FROM c WHERE NOT IS_DEFINED(c.sfKind)");
    hotels = e2e_query_all(cli, DB, "hotels", "SELECT * FROM c WHERE NOT IS_DEFINED(c.sfKind)");
    cars = e2e_query_all(cli, DB, "cars", "SELECT * FROM c WHERE NOT IS_DEFINED(c.sfKind)");
    wallets = e2e_query_all(cli, DB, "wallets", "SELECT * FROM c WHERE NOT IS_DEFINED(c.sfKind)");
    for (size_t c = 0; c < SF_ARRAY_LEN(effect_colls); c++)
        markers[c] =
            e2e_query_all(cli, DB, effect_colls[c], "SELECT * FROM c WHERE c.sfKind = 'marker'");
    ck_assert_uint_eq(json_array_size(bookings), BOOKINGS);
    json_array_foreach(hotels, i, d)
    {
        rooms += json_integer_value(json_object_get(d, "rooms"));
        holds += (long long)json_object_size(json_object_get(d, "holds"));
    }
    json_array_foreach(wallets, i, d) balance += json_integer_value(json_object_get(d, "balance"));
    json_array_foreach(bookings, i, d)
    {
        const char *id = sf_json_str(d, "id"), *s = sf_json_str(d, "status");
        bool has_car = json_object_get(d, "car") != NULL;
        int num = atoi_id(id);
        int dos = markers_of(markers, 5, id, "do", NULL);
        int undos = markers_of(markers, 5, id, "undo", NULL);
        int n_events = 0;
        json_t *e;
        size_t j;
        char seat_id[32], car_id[32];
        bool seat_mine = false, car_there = false, held = false;
        json_t *sd;
        size_t q;

        json_array_foreach(events, j, e)
        {
            if (strcmp(sf_json_str(e, "sagaId"), id) == 0)
                n_events++;
        }
        (void)snprintf(seat_id, sizeof(seat_id), "%s-%s", sf_json_str(d, "flight"),
                       sf_json_str(d, "seat"));
        (void)snprintf(car_id, sizeof(car_id), "car-%s", id);
        json_array_foreach(seats, q, sd) seat_mine |= strcmp(sf_json_str(sd, "id"), seat_id) == 0 &&
                                                      strcmp(sf_json_str(sd, "bookingId"), id) == 0;
        json_array_foreach(cars, q, sd) car_there |= strcmp(sf_json_str(sd, "id"), car_id) == 0;
        json_array_foreach(hotels, q, sd) held |=
            json_object_get(json_object_get(sd, "holds"), id) != NULL;
        if (!has_car) {
            ck_assert_msg(markers_of(markers, 5, id, "do", "rent_car") == 0,
                          "%s: a skipped car step left a marker", id);
            skipped_cars++;
        }
        if (strcmp(s, "confirmed") == 0) {
            confirmed++;
            paid += json_integer_value(json_object_get(d, "total"));
            ck_assert_msg(dos == (has_car ? 5 : 4) && undos == 0, "%s confirmed: %d do, %d undo",
                          id, dos, undos);
            ck_assert_msg(num % 7 != 3, "%s confirmed without a confirmation", id);
            ck_assert_msg(seat_mine && held && car_there == has_car,
                          "%s confirmed: seat %d, room hold %d, car %d", id, seat_mine, held,
                          car_there);
            /* SeatHeld, RoomHeld, CarRented (skipped or not), PaymentCharged, BookingConfirmed */
            ck_assert_msg(n_events == 5, "%s confirmed with %d events", id, n_events);
        } else {
            ck_assert_str_eq(s, "cancelled");
            cancelled++;
            ck_assert_msg(dos == undos, "%s cancelled: %d do, %d undo", id, dos, undos);
            ck_assert_msg(!seat_mine && !held && !car_there,
                          "%s cancelled but holds: seat %d, room %d, car %d", id, seat_mine, held,
                          car_there);
            /* the transitions it passed, then cancelling and cancelled: each once */
            ck_assert_msg(n_events >= 2 && n_events <= 6, "%s cancelled with %d events", id,
                          n_events);
            if (strcmp(sf_json_str(d, "reason"), "payment not confirmed within 3s") == 0) {
                timed_out++;
                ck_assert_msg(num % 7 == 3, "%s timed out although confirmed", id);
                ck_assert_str_eq(sf_json_str(d, "sfFailedStep"), "confirm_payment");
            }
        }
        ck_assert_msg(!json_is_object(json_object_get(d, "sfWait")), "%s settled but waiting", id);
        if (json_integer_value(json_object_get(d, "sfDeadline")) == 1) {
            expired++;
            ck_assert_str_eq(s, "cancelled");
            ck_assert_str_eq(sf_json_str(d, "reason"), "deadline exceeded");
            ck_assert_msg(dos == 0 && n_events == 2, "%s expired: %d do markers, %d events", id,
                          dos, n_events);
        }
    }
    /* Conservation: everything held belongs to a confirmed booking, nothing else is held. */
    ck_assert_int_eq((long long)json_array_size(seats), confirmed);
    ck_assert_int_eq(rooms + confirmed, (long long)HOTELS * ROOMS);
    ck_assert_int_eq(holds, confirmed);
    ck_assert_int_eq(balance + paid, (long long)CUSTOMERS * BALANCE);
    ck_assert_int_gt(confirmed, 0);
    ck_assert_int_gt(cancelled - expired, 0);
    ck_assert_int_eq(expired, BOOKINGS / 12);
    ck_assert_int_gt(timed_out, 0);
    (void)printf("travel: %d bookings (%d confirmed, %d cancelled of which %d by deadline, %d by "
                 "an await timeout), %d without a car; kill -9 %d times; settled in %lldms\n",
                 BOOKINGS, confirmed, cancelled, expired, timed_out, skipped_cars, kills,
                 (long long)(sf_mono_ms() - t0));
    for (size_t c = 0; c < SF_ARRAY_LEN(effect_colls); c++)
        json_decref(markers[c]);
    json_decref(bookings);
    json_decref(events);
    json_decref(seats);
    json_decref(hotels);
    json_decref(cars);
    json_decref(wallets);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

/* The sum of N over the "woke N waiting saga(s)" lines of log. */
static long woke_in_log(const char *log)
{
    char *text = e2e_slurp(log);
    long sum = 0;

    ck_assert_msg(text != NULL, "cannot read %s", log);
    for (const char *p = strstr(text, "woke "); p != NULL; p = strstr(p + 5, "woke ")) {
        char *end;
        long n = strtol(p + 5, &end, 10);

        if (end != p + 5 && strncmp(end, " waiting saga", 13) == 0)
            sum += n;
    }
    free(text);
    return sum;
}

START_TEST(test_travel_timers_two_instances)
{
    static const char *const edits[] = {"timeout = \"30s\"", "timeout = \"2s\"",
                                        "not confirmed within 30s", "not confirmed within 2s",
                                        NULL};
    struct harness_cosmolite_opts ho = {.memory = true, .partitions = 4};
    struct harness_cosmolite *h = NULL;
    struct cosmos_client *cli;
    struct sf_err err;
    char cfg[512], log_a[512], log_b[512];
    const char *args_a[] = {"run", "-c", cfg, "--instance", "timer-a", "--log-level", "info", NULL};
    const char *args_b[] = {"run", "-c", cfg, "--instance", "timer-b", "--log-level", "info", NULL};
    int settled = 0, confirmed = 0;
    long woke_a, woke_b;
    int64_t until;
    json_t *woken;
    pid_t a, b;

    ck_assert_msg(harness_cosmolite_start(&ho, &h, &err) == SF_OK, "%s", err.msg);
    cli = e2e_client(h);
    travel_seed(cli, BALANCE * 10);
    e2e_make_config(cfg, sizeof(cfg),
                    &(const struct e2e_config){
                        .name = "timers",
                        .endpoint = harness_cosmolite_endpoint(h),
                        .db = DB,
                        .example = "travel-booking.cfg",
                        .edits = edits,
                        .extra = "processor = { workers = 8; max_attempts = 20; backoff_base = "
                                 "\"10ms\"; backoff_cap = \"500ms\"; timer_interval = "
                                 "\"200ms\"; };"});
    (void)snprintf(log_a, sizeof(log_a), "%s/timers-a.log", e2e_tmp);
    (void)snprintf(log_b, sizeof(log_b), "%s/timers-b.log", e2e_tmp);
    a = e2e_spawn(harness_cosmolite_key(h), log_a, args_a);
    b = e2e_spawn(harness_cosmolite_key(h), log_b, args_b);
    for (int k = 0; k < 180; k++)
        write_booking(cli, k); /* and no confirmation: every wait times out */
    until = sf_mono_ms() + 120000;
    while ((settled = count_settled(cli, &confirmed)) < 180 && sf_mono_ms() < until)
        sf_sleep_ms(200);
    e2e_stop(a, log_a);
    e2e_stop(b, log_b);
    ck_assert_msg(settled == 180, "%d of 180 bookings settled", settled);
    ck_assert_int_eq(confirmed, 0);
    woke_a = woke_in_log(log_a);
    woke_b = woke_in_log(log_b);
    woken = e2e_query_all(cli, DB, "bookings", "SELECT c.id FROM c WHERE IS_DEFINED(c.sfWoken)");
    (void)printf("timers: %zu bookings woken by a timer; instance a logged %ld wakes, b %ld\n",
                 json_array_size(woken), woke_a, woke_b);
    ck_assert_uint_gt(json_array_size(woken), 0);
    /* each woken once: the wakes the two logs count are the bookings woken, no more */
    ck_assert_int_eq(woke_a + woke_b, (long)json_array_size(woken));
    json_decref(woken);
    cosmos_client_free(cli);
    harness_cosmolite_free(h);
}
END_TEST

int main(void)
{
    const struct e2e_case tests[] = {
        {"travel_kill9", test_travel_kill9},
        {"travel_timers_two_instances", test_travel_timers_two_instances}};

    return e2e_main("sf-travel", "travel_e2e", tests, SF_ARRAY_LEN(tests), 300, CK_VERBOSE);
}
