/*
 * test_steps_sql.c - the local Cosmos SQL evaluator (steps/step_sql.h) and
 * templates (steps/step_tmpl.h): table-driven cases, no server.
 */
#include "common/sf_base.h"

#include <check.h>

#include "common/sf_json.h"
#include "steps/step_sql.h"
#include "steps/step_tmpl.h"
#include "tests/support/check_run.h"

static const char *DOC =
    "{\"id\":\"o-1\",\"type\":\"order\",\"status\":\"placed\",\"total\":30,\"ratio\":0.5,"
    "\"vip\":true,\"note\":null,\"customer\":{\"name\":\"Ann O'Neil\",\"tier\":2},"
    "\"lines\":[{\"sku\":\"p-1\",\"qty\":2},{\"sku\":\"p-2\",\"qty\":1}],"
    "\"tags\":[\"a\",\"b\"],\"weird key\":7}";

static json_t *load(const char *text)
{
    json_t *v = sf_json_parse(text, strlen(text), NULL);

    ck_assert_ptr_nonnull(v);
    return v;
}

struct match_case {
    const char *query;
    bool expect;
};

static const struct match_case match_cases[] = {
    {"FROM c", true},
    {"SELECT * FROM c WHERE c.type = 'order'", true},
    {"FROM c WHERE c.type = \"order\"", true},
    {"FROM c WHERE c.type != 'order'", false},
    {"FROM c WHERE c.type <> 'x'", true},
    {"FROM c WHERE c.total >= 30 AND c.total < 31", true},
    {"FROM c WHERE c.total = 30.0", true},
    {"FROM c WHERE c.total > 30", false},
    {"FROM c WHERE c.ratio * 2 = 1", true},
    {"FROM c WHERE c.total + 1 = 31 AND c.total - 1 = 29 AND c.total / 3 = 10 AND c.total % 7 = 2",
     true},
    {"FROM c WHERE -c.total = -30", true},
    /* undefined and type mismatches */
    {"FROM c WHERE c.missing = 1", false},
    {"FROM c WHERE NOT (c.missing = 1)", false},
    {"FROM c WHERE c.total = '30'", false},
    {"FROM c WHERE NOT (c.total = '30')", false},
    {"FROM c WHERE c.total > 'a'", false},
    {"FROM c WHERE c.missing = 1 OR c.vip", true},
    {"FROM c WHERE c.missing = 1 AND c.vip", false},
    {"FROM c WHERE NOT (c.missing = 1 AND false)", true},
    {"FROM c WHERE c.vip", true},
    {"FROM c WHERE c.total", false}, /* not a boolean */
    {"FROM c WHERE c.note = null", true},
    {"FROM c WHERE IS_NULL(c.note) AND IS_DEFINED(c.note) AND NOT IS_DEFINED(c.nope)", true},
    {"FROM c WHERE IS_NUMBER(c.total) AND IS_STRING(c.id) AND IS_BOOL(c.vip)", true},
    {"FROM c WHERE IS_ARRAY(c.lines) AND IS_OBJECT(c.customer) AND NOT IS_OBJECT(c.lines)", true},
    /* paths */
    {"FROM c WHERE c.customer.tier = 2", true},
    {"FROM c WHERE c[\"customer\"]['name'] = 'Ann O\\'Neil'", true},
    {"FROM c WHERE c.lines[1].sku = 'p-2'", true},
    {"FROM c WHERE c.lines[5].sku = 'p-2'", false},
    {"FROM c WHERE c[\"weird key\"] = 7", true},
    /* IN, BETWEEN */
    {"FROM c WHERE c.status IN ('placed', 'reserved')", true},
    {"FROM c WHERE c.status NOT IN ('placed', 'reserved')", false},
    {"FROM c WHERE c.total IN (1, 30)", true},
    {"FROM c WHERE c.total IN ('30')", false},
    {"FROM c WHERE c.total BETWEEN 10 AND 30", true},
    {"FROM c WHERE c.total NOT BETWEEN 10 AND 30", false},
    /* functions */
    {"FROM c WHERE STARTSWITH(c.id, 'o-') AND ENDSWITH(c.id, '1') AND CONTAINS(c.type, 'rde')",
     true},
    {"FROM c WHERE STARTSWITH(c.id, 'O-', true) AND NOT STARTSWITH(c.id, 'O-')", true},
    {"FROM c WHERE ARRAY_CONTAINS(c.tags, 'b') AND NOT ARRAY_CONTAINS(c.tags, 'z')", true},
    {"FROM c WHERE ARRAY_CONTAINS(c.lines, {sku: 'p-1'}, true)", true},
    {"FROM c WHERE ARRAY_CONTAINS(c.lines, {sku: 'p-1'})", false},
    {"FROM c WHERE ARRAY_LENGTH(c.lines) = 2 AND LENGTH(c.id) = 3", true},
    {"FROM c WHERE LOWER('AbC') = 'abc' AND UPPER(c.type) = 'ORDER'", true},
    {"FROM c WHERE ABS(-2) = 2 AND FLOOR(2.7) = 2", true},
    {"FROM c WHERE c.tags = ['a', 'b'] AND c.customer = {tier: 2, name: 'Ann O\\'Neil'}", true},
    {"FROM c WHERE c.missing ?? 5 = 5", true},
    {"FROM c WHERE c.id || '!' = 'o-1!'", true},
    {"FROM c WHERE c.type = @t AND c.total > @min", true},
    {"from c where c.TYPE = 'order'", false}, /* property names are case-sensitive */
    {"from c where c.type = 'order' and not c.vip = false", true},
};

START_TEST(test_sql_match_table)
{
    json_t *doc = load(DOC);
    json_t *params = load("{\"@t\":\"order\",\"@min\":10}");

    for (size_t i = 0; i < SF_ARRAY_LEN(match_cases); i++) {
        struct step_sql *q = NULL;
        struct sf_err err;
        bool m = !match_cases[i].expect;

        sf_err_clear(&err);
        ck_assert_msg(step_sql_compile(match_cases[i].query, &q, &err) == SF_OK, "%s: %s",
                      match_cases[i].query, err.msg);
        ck_assert_msg(step_sql_match(q, doc, params, &m, &err) == SF_OK, "%s: %s",
                      match_cases[i].query, err.msg);
        ck_assert_msg(m == match_cases[i].expect, "%s: got %d", match_cases[i].query, m);
        step_sql_free(q);
    }
    json_decref(doc);
    json_decref(params);
}
END_TEST

static const struct {
    const char *query;
    const char *msg; /* substring of the error */
} bad_cases[] = {
    {"", "expected FROM"},
    {"SELECT c.id FROM c", "only SELECT *"},
    {"FROM c WHERE", "unexpected end"},
    {"FROM c WHERE c.a = ", "unexpected end"},
    {"FROM c WHERE (c.a = 1", "expected ')'"},
    {"FROM c WHERE x.a = 1", "unknown identifier"},
    {"FROM c WHERE c.a = 'open", "unterminated"},
    {"FROM c WHERE NOSUCH(c.a)", "unknown function"},
    {"FROM c WHERE IS_DEFINED(c.a, c.b)", "wrong number of arguments"},
    {"FROM c WHERE c.a = 1 garbage", "unexpected text"},
    {"FROM c WHERE c.a NOT LIKE 1", "expected IN or BETWEEN"},
    {"FROM c WHERE c.a BETWEEN 1 OR 2", "expected AND"},
    {"FROM c WHERE c.a = 1 # x", "unexpected character"},
    {"FROM c WHERE c[-1] = 1", "non-negative integer"},
};

START_TEST(test_sql_errors)
{
    for (size_t i = 0; i < SF_ARRAY_LEN(bad_cases); i++) {
        struct step_sql *q = NULL;
        struct sf_err err;

        sf_err_clear(&err);
        ck_assert_msg(step_sql_compile(bad_cases[i].query, &q, &err) == SF_EINVAL, "'%s' compiled",
                      bad_cases[i].query);
        ck_assert_ptr_null(q);
        ck_assert_msg(strstr(err.msg, bad_cases[i].msg) != NULL, "'%s': message '%s'",
                      bad_cases[i].query, err.msg);
        ck_assert_msg(strncmp(err.msg, "at ", 3) == 0, "'%s': no position in '%s'",
                      bad_cases[i].query, err.msg);
    }
}
END_TEST

START_TEST(test_sql_missing_param_and_depth)
{
    struct step_sql *q = NULL;
    struct sf_err err;
    json_t *doc = load(DOC);
    bool m = true;
    char deep[4096];
    size_t n = 0;

    ck_assert_int_eq(step_sql_compile("FROM c WHERE c.type = @nope", &q, &err), SF_OK);
    ck_assert_int_eq(step_sql_match(q, doc, NULL, &m, &err), SF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "@nope"));
    step_sql_free(q);
    q = NULL;
    /* nesting deeper than the limit fails cleanly instead of exhausting the stack */
    n += (size_t)snprintf(deep, sizeof(deep), "FROM c WHERE ");
    for (int i = 0; i < 200; i++)
        deep[n++] = '(';
    deep[n] = '\0';
    ck_assert_int_eq(step_sql_compile(deep, &q, &err), SF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "nested too deeply"));
    json_decref(doc);
}
END_TEST

START_TEST(test_sql_literal)
{
    struct sf_buf b;
    json_t *v = load("[\"it's \\\\ ok\", 5, 2.5, true, null, {\"a\":\"x\"}]");

    sf_buf_init(&b, 4096);
    ck_assert_int_eq(step_sql_literal(v, &b), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&b), "['it\\'s \\\\ ok',5,2.5,true,null,{\"a\":'x'}]");
    sf_buf_release(&b);
    json_decref(v);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Templates
 */

static json_t *env_for_tests(void)
{
    json_t *item = load(DOC);
    json_t *env =
        json_pack("{s:o, s:o, s:i, s:s}", "item", item, "it",
                  json_pack("{s:s, s:i, s:s}", "sku", "p-2", "qty", 3, "category", "books"),
                  "index", 1, "sagaId", "o-1");

    ck_assert_ptr_nonnull(env);
    return env;
}

static char *render_json(const char *tmpl_json)
{
    json_t *t = load(tmpl_json), *env = env_for_tests(), *out = NULL;
    struct step_tmpl *tp = NULL;
    struct sf_err err;
    struct sf_buf b;
    char *s;

    sf_err_clear(&err);
    ck_assert_msg(step_tmpl_compile(t, &tp, &err) == SF_OK, "%s: %s", tmpl_json, err.msg);
    ck_assert_msg(step_tmpl_render(tp, env, &out, &err) == SF_OK, "%s: %s", tmpl_json, err.msg);
    sf_buf_init(&b, 1 << 20);
    ck_assert_int_eq(sf_json_dump(out, &b), SF_OK);
    s = sf_buf_detach(&b, NULL);
    json_decref(out);
    json_decref(t);
    json_decref(env);
    step_tmpl_free(tp);
    return s;
}

START_TEST(test_tmpl_typed_values)
{
    static const struct {
        const char *tmpl, *expect;
    } cases[] = {
        {"\"{{it.qty}}\"", "3"},
        {"\"{{ -it.qty }}\"", "-3"},
        {"\"{{it.qty * 2 + 1}}\"", "7"},
        {"\"{{item.ratio}}\"", "0.5"},
        {"\"{{item.vip}}\"", "true"},
        {"\"{{item.note}}\"", "null"},
        {"\"{{item.lines}}\"", "[{\"sku\":\"p-1\",\"qty\":2},{\"sku\":\"p-2\",\"qty\":1}]"},
        {"\"{{item.customer}}\"", "{\"name\":\"Ann O'Neil\",\"tier\":2}"},
        {"\"pay-{{item.id}}\"", "\"pay-o-1\""},
        {"\"{{it.sku}}x{{it.qty}}\"", "\"p-2x3\""},
        {"\"n={{item.tags}}\"", "\"n=[\\\"a\\\",\\\"b\\\"]\""},
        {"\"{{item.nothing ?? 'none'}}\"", "\"none\""},
        {"\"no placeholders\"", "\"no placeholders\""},
        {"{\"id\":\"s-{{sagaId}}\",\"n\":\"{{index}}\",\"keep\":[1,\"{{it.category}}\",false]}",
         "{\"id\":\"s-o-1\",\"n\":1,\"keep\":[1,\"books\",false]}"},
        {"5", "5"},
    };

    for (size_t i = 0; i < SF_ARRAY_LEN(cases); i++) {
        char *got = render_json(cases[i].tmpl);

        ck_assert_msg(strcmp(got, cases[i].expect) == 0, "%s -> %s (want %s)", cases[i].tmpl, got,
                      cases[i].expect);
        free(got);
    }
}
END_TEST

START_TEST(test_tmpl_sql_mode_escapes)
{
    struct step_tmpl *t = NULL;
    struct sf_buf b;
    json_t *env = env_for_tests();
    struct sf_err err;
    struct step_sql *q = NULL;
    bool m = false;

    ck_assert_int_eq(step_tmpl_compile_str("FROM c WHERE c.customer.name = {{item.customer.name}} "
                                           "AND c.total >= {{it.qty}}",
                                           STEP_TMPL_SQL, &t, &err),
                     SF_OK);
    sf_buf_init(&b, 4096);
    ck_assert_int_eq(step_tmpl_render_text(t, env, &b, &err), SF_OK);
    ck_assert_str_eq(sf_buf_cstr(&b),
                     "FROM c WHERE c.customer.name = 'Ann O\\'Neil' AND c.total >= 3");
    /* the rendered condition is valid SQL that means what it says */
    ck_assert_int_eq(step_sql_compile(sf_buf_cstr(&b), &q, &err), SF_OK);
    ck_assert_int_eq(step_sql_match(q, json_object_get(env, "item"), NULL, &m, &err), SF_OK);
    ck_assert(m);
    step_sql_free(q);
    sf_buf_release(&b);
    step_tmpl_free(t);
    json_decref(env);
}
END_TEST

START_TEST(test_tmpl_errors)
{
    struct step_tmpl *t = NULL;
    struct sf_err err;
    json_t *env = env_for_tests(), *out = NULL;
    char *s = NULL;

    ck_assert_int_eq(step_tmpl_compile_str("x {{it.qty", STEP_TMPL_TEXT, &t, &err), SF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "has no '}}'"));
    ck_assert_int_eq(step_tmpl_compile_str("{{it.qty +}}", STEP_TMPL_TEXT, &t, &err), SF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "template {{it.qty +}}"));
    ck_assert_ptr_null(t);
    /* undefined values are errors that name the placeholder */
    ck_assert_int_eq(step_tmpl_compile_str("{{it.missing}}", STEP_TMPL_JSON, &t, &err), SF_OK);
    ck_assert_int_eq(step_tmpl_render(t, env, &out, &err), SF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "{{it.missing}} is undefined"));
    ck_assert_ptr_null(out);
    step_tmpl_free(t);
    t = NULL;
    /* an empty id is refused */
    ck_assert_int_eq(step_tmpl_compile_str("{{item.nothing ?? ''}}", STEP_TMPL_TEXT, &t, &err),
                     SF_OK);
    ck_assert_int_eq(step_tmpl_render_str(t, env, &s, &err), SF_EINVAL);
    ck_assert_ptr_null(s);
    step_tmpl_free(t);
    json_decref(env);
}
END_TEST

static Suite *sql_suite(void)
{
    Suite *s = suite_create("steps_sql");

    sf_check_case(s, "sql", NULL, NULL, 0,
                  (const TTest *[]){test_sql_match_table, test_sql_errors,
                                    test_sql_missing_param_and_depth, test_sql_literal, NULL});
    sf_check_case(s, "templates", NULL, NULL, 0,
                  (const TTest *[]){test_tmpl_typed_values, test_tmpl_sql_mode_escapes,
                                    test_tmpl_errors, NULL});
    return s;
}

int main(void)
{
    return sf_check_run(sql_suite());
}
