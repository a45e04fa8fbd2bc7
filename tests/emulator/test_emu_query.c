/*
 * test_emu_query.c - unit tests of cosmolite's SQL engine (emulator/emu_query*).
 *
 * Most tests are rows of data: a query, its parameters, the documents it runs
 * over and the exact JSON result (or, for errors, the code and a piece of the
 * message with its position). The rest exercise the streaming API (windows,
 * early stop, paging), patch conditions, query plans and every limit.
 */
#include "common/sf_base.h"

#include <check.h>
#include <pthread.h>
#include <jansson.h>

#include "common/sf_json.h"
#include "emulator/emu_http.h"
#include "emulator/emu_query.h"
#include "tests/support/check_run.h"

/* ---- documents ---------------------------------------------------------------------- */

/*
 * D1: the general set. n is a number except in doc 4 (a string), b is
 * true/false/missing/missing/null, doc 3's obj has doc 1's members in another
 * order, doc 5 has keys that need brackets.
 */
#define D1                                                                                         \
    "[{\"id\":\"1\",\"pk\":\"a\",\"n\":1,\"s\":\"apple\",\"b\":true,\"arr\":[1,2,3],"              \
    "\"obj\":{\"x\":1,\"y\":\"z\"},\"tags\":[\"red\",\"fruit\"],\"nul\":null},"                    \
    "{\"id\":\"2\",\"pk\":\"a\",\"n\":2.5,\"s\":\"Banana\",\"b\":false,\"arr\":[],"                \
    "\"obj\":{\"x\":2},\"tags\":[\"yellow\",\"fruit\"]},"                                          \
    "{\"id\":\"3\",\"pk\":\"b\",\"n\":-3,\"s\":\"cherry\",\"arr\":[3,4],"                          \
    "\"obj\":{\"y\":\"z\",\"x\":1},\"nul\":null,\"deep\":{\"a\":{\"b\":{\"c\":42}}}},"             \
    "{\"id\":\"4\",\"pk\":\"b\",\"n\":\"10\",\"s\":\"date\","                                      \
    "\"items\":[{\"sku\":\"x\",\"q\":2},{\"sku\":\"y\",\"q\":5}]},"                                \
    "{\"id\":\"5\",\"pk\":\"c\",\"n\":10,\"s\":\"\\u00c9clair\",\"b\":null,"                       \
    "\"my key\":\"spaced\",\"value\":7,\"it's\":\"q\"}]"

/* D2: one value of every type (and one missing) for cross-type ordering. */
#define D2                                                                                         \
    "[{\"id\":\"a\",\"v\":\"b\"},{\"id\":\"b\",\"v\":2},{\"id\":\"c\"},{\"id\":\"d\",\"v\":null}," \
    "{\"id\":\"e\",\"v\":true},{\"id\":\"f\",\"v\":[1]},{\"id\":\"g\",\"v\":{\"a\":1}},"           \
    "{\"id\":\"h\",\"v\":false},{\"id\":\"i\",\"v\":\"a\"},{\"id\":\"j\",\"v\":-1.5}]"

#define NODOCS "[]"

static json_t *parse_json(const char *text)
{
    json_error_t jerr;
    json_t *v = json_loads(text, JSON_DECODE_ANY, &jerr);

    ck_assert_msg(v != NULL, "bad test JSON '%s': %s", text, jerr.text);
    return v;
}

/* Runs query over docs and returns the result (new reference) or NULL with *err. */
static json_t *run_query(const char *query, const char *params_text, const char *docs_text,
                         struct sf_err *err)
{
    json_t *params = params_text != NULL ? parse_json(params_text) : NULL;
    json_t *docs = parse_json(docs_text), *rows = NULL;
    struct emu_query *q = NULL;

    sf_err_clear(err);
    if (emu_query_parse(query, params, NULL, &q, err) == SF_OK) {
        json_decref(params);
        params = NULL; /* the query keeps its own references to parameter values */
        if (emu_query_run(q, docs, &rows, err) != SF_OK)
            rows = NULL;
    }
    emu_query_free(q);
    json_decref(params);
    json_decref(docs);
    return rows;
}

static void assert_result(const char *query, const char *params, const char *docs,
                          const char *expect)
{
    struct sf_err err;
    json_t *rows = run_query(query, params, docs, &err);
    json_t *want = parse_json(expect);
    char *got;

    ck_assert_msg(rows != NULL, "query '%s' failed: %s", query, err.msg);
    got = json_dumps(rows, JSON_COMPACT | JSON_ENCODE_ANY);
    ck_assert_msg(json_equal(rows, want), "query '%s'\n  got  %s\n  want %s", query, got, expect);
    free(got);
    json_decref(rows);
    json_decref(want);
}

/* ---- result cases ------------------------------------------------------------------ */

struct qcase {
    const char *query;
    const char *params; /* JSON text or NULL */
    const char *docs;
    const char *expect;
};

static const struct qcase result_cases[] = {
    /* projections, aliases, FROM forms */
    {"SELECT VALUE c.id FROM c", NULL, D1, "[\"1\",\"2\",\"3\",\"4\",\"5\"]"},
    {"select value c.id from c where c.pk = \"a\"", NULL, D1, "[\"1\",\"2\"]"},
    {"SELECT VALUE r.id FROM root r WHERE r.n = 1", NULL, D1, "[\"1\"]"},
    {"SELECT VALUE x.id FROM c AS x WHERE x.b = true", NULL, D1, "[\"1\"]"},
    {"SeLeCt VaLuE Families.id FrOm Families WhErE Families.id = '2'", NULL, D1, "[\"2\"]"},
    {"SELECT c.id, c.n FROM c WHERE c.pk = 'b'", NULL, D1,
     "[{\"id\":\"3\",\"n\":-3},{\"id\":\"4\",\"n\":\"10\"}]"},
    {"SELECT c.id, c.b FROM c", NULL, D1,
     "[{\"id\":\"1\",\"b\":true},{\"id\":\"2\",\"b\":false},{\"id\":\"3\"},{\"id\":\"4\"},"
     "{\"id\":\"5\",\"b\":null}]"},
    {"SELECT c.id AS i, c.obj.x AS x FROM c WHERE c.pk = 'a'", NULL, D1,
     "[{\"i\":\"1\",\"x\":1},{\"i\":\"2\",\"x\":2}]"},
    {"SELECT c.missing FROM c WHERE c.id = '1'", NULL, D1, "[{}]"},
    {"SELECT VALUE c.missing FROM c", NULL, D1, "[]"},
    {"SELECT c.obj FROM c WHERE c.id = '2'", NULL, D1, "[{\"obj\":{\"x\":2}}]"},
    {"SELECT c FROM c WHERE c.id = '2'", NULL, "[{\"id\":\"1\"},{\"id\":\"2\",\"k\":[true]}]",
     "[{\"c\":{\"id\":\"2\",\"k\":[true]}}]"},
    {"SELECT * FROM c WHERE c.id = '2'", NULL, "[{\"id\":\"1\"},{\"id\":\"2\",\"k\":[true]}]",
     "[{\"id\":\"2\",\"k\":[true]}]"},
    {"SELECT 1, c.id, 'x' FROM c WHERE c.id = '1'", NULL, D1,
     "[{\"$1\":1,\"id\":\"1\",\"$2\":\"x\"}]"},
    {"SELECT c.deep.a.b.c FROM c WHERE c.id = '3'", NULL, D1, "[{\"c\":42}]"},
    {"SELECT VALUE c[\"my key\"] FROM c WHERE c.id = '5'", NULL, D1, "[\"spaced\"]"},
    {"SELECT c[\"my key\"] FROM c WHERE c.id = '5'", NULL, D1, "[{\"my key\":\"spaced\"}]"},
    {"SELECT VALUE c['it\\'s'] FROM c WHERE c.id = '5'", NULL, D1, "[\"q\"]"},
    {"SELECT VALUE c[\"value\"] FROM c WHERE c.id = '5'", NULL, D1, "[7]"},
    {"SELECT VALUE c.arr[0] FROM c", NULL, D1, "[1,3]"},
    {"SELECT VALUE c.items[1].q FROM c", NULL, D1, "[5]"},
    {"SELECT VALUE c.arr[-1] FROM c", NULL, D1, "[]"},
    {"SELECT VALUE c.arr[1.5] FROM c", NULL, D1, "[]"},
    {"SELECT VALUE c[\"obj\"][\"x\"] FROM c WHERE c.pk = 'a'", NULL, D1, "[1,2]"},
    {"SELECT VALUE c.obj[@k] FROM c WHERE c.id = '1'", "[{\"name\":\"@k\",\"value\":\"y\"}]", D1,
     "[\"z\"]"},
    {"SELECT VALUE c.arr[@i] FROM c WHERE c.id = '1'", "[{\"name\":\"@i\",\"value\":2}]", D1,
     "[3]"},
    {"SELECT c.arr[0] FROM c WHERE c.id = '1'", NULL, D1, "[{\"$1\":1}]"},
    {"SELECT VALUE c.s.length FROM c", NULL, D1, "[]"},
    {"SELECT VALUE c.arr[0].x FROM c", NULL, D1, "[]"},

    /* literals and SELECT without FROM */
    {"SELECT VALUE 1", NULL, NODOCS, "[1]"},
    {"SELECT VALUE 'a' || \"b\"", NULL, NODOCS, "[\"ab\"]"},
    {"SELECT VALUE \"tab\\there \\\"q\\\" \\u00e9 \\ud83d\\ude00 \\/\"", NULL, NODOCS,
     "[\"tab\\there \\\"q\\\" \\u00e9 \\ud83d\\ude00 /\"]"},
    {"SELECT VALUE [1, 'two', null, true, false]", NULL, NODOCS, "[[1,\"two\",null,true,false]]"},
    {"SELECT VALUE {\"a\": 1, \"b\": [1, {\"c\": null}]}", NULL, NODOCS,
     "[{\"a\":1,\"b\":[1,{\"c\":null}]}]"},
    {"SELECT VALUE undefined", NULL, NODOCS, "[]"},
    {"SELECT VALUE [1, undefined, 2]", NULL, NODOCS, "[[1,2]]"},
    {"SELECT VALUE {\"a\": undefined, \"b\": 1}", NULL, NODOCS, "[{\"b\":1}]"},
    {"SELECT VALUE [1.5e2, .5, -0.25, 1.0, 2E-1]", NULL, NODOCS, "[[150,0.5,-0.25,1,0.2]]"},
    {"SELECT 1 AS one, 'x' AS two", NULL, NODOCS, "[{\"one\":1,\"two\":\"x\"}]"},
    {"SELECT VALUE null", NULL, NODOCS, "[null]"},
    {"SELECT VALUE {}", NULL, NODOCS, "[{}]"},
    {"SELECT VALUE 1 FROM c", NULL, NODOCS, "[]"},
    {"SELECT VALUE 1 FROM c", NULL, "[{},{}]", "[1,1]"},

    /* arithmetic, bitwise, concatenation */
    {"SELECT VALUE 1 + 2 * 3", NULL, NODOCS, "[7]"},
    {"SELECT VALUE (1 + 2) * 3", NULL, NODOCS, "[9]"},
    {"SELECT VALUE [7 % 3, 7 / 2, 10 - 2 - 3, 2 * 3 % 4, -7 % 3]", NULL, NODOCS,
     "[[1,3.5,5,2,-1]]"},
    {"SELECT VALUE 1 / 0", NULL, NODOCS, "[]"},
    {"SELECT VALUE 5 % 0", NULL, NODOCS, "[]"},
    {"SELECT VALUE -c.n FROM c WHERE c.id = '3'", NULL, D1, "[3]"},
    {"SELECT VALUE c.n + 1 FROM c", NULL, D1, "[2,3.5,-2,11]"},
    {"SELECT VALUE 'a' + 1", NULL, NODOCS, "[]"},
    {"SELECT VALUE 0.1 + 0.2", NULL, NODOCS, "[0.30000000000000004]"},
    {"SELECT VALUE [5 & 3, 5 | 3, 5 ^ 3, ~5, 1 << 4, -16 >> 2, -16 >>> 28]", NULL, NODOCS,
     "[[1,7,6,-6,16,-4,15]]"},
    {"SELECT VALUE 4294967297 | 0", NULL, NODOCS, "[1]"},
    {"SELECT VALUE +'a'", NULL, NODOCS, "[]"},
    {"SELECT VALUE [+2, - -2, -(1 - 3)]", NULL, NODOCS, "[[2,2,2]]"},
    {"SELECT VALUE 'a' || 'b' || 'c'", NULL, NODOCS, "[\"abc\"]"},
    {"SELECT VALUE 'x' || 1", NULL, NODOCS, "[]"},
    {"SELECT VALUE c.s || '!' FROM c WHERE c.pk = 'a'", NULL, D1, "[\"apple!\",\"Banana!\"]"},
    {"SELECT VALUE 1e308 * 10", NULL, NODOCS, "[]"},

    /* comparisons and three-valued logic */
    {"SELECT VALUE c.id FROM c WHERE c.n > 1", NULL, D1, "[\"2\",\"5\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.n >= \"1\"", NULL, D1, "[\"4\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.n != 1", NULL, D1, "[\"2\",\"3\",\"5\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.n <> 1", NULL, D1, "[\"2\",\"3\",\"5\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.n <= 1 AND c.n < 2", NULL, D1, "[\"1\",\"3\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.b = null", NULL, D1, "[\"5\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.b != null", NULL, D1, "[]"},
    {"SELECT VALUE c.id FROM c WHERE c.nul = null", NULL, D1, "[\"1\",\"3\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.b = false", NULL, D1, "[\"2\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.b", NULL, D1, "[\"1\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.n", NULL, D1, "[]"},
    {"SELECT VALUE c.id FROM c WHERE NOT c.b", NULL, D1, "[\"2\"]"},
    {"SELECT VALUE c.id FROM c WHERE NOT (c.n = 1)", NULL, D1, "[\"2\",\"3\",\"5\"]"},
    {"SELECT VALUE c.id FROM c WHERE NOT c.n = 1", NULL, D1, "[\"2\",\"3\",\"5\"]"},
    {"SELECT VALUE c.id FROM c WHERE NOT NOT c.b", NULL, D1, "[\"1\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.n = 1 OR c.s = 'date'", NULL, D1, "[\"1\",\"4\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.pk = 'a' AND c.n > 2", NULL, D1, "[\"2\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.pk = 'b' OR c.pk = 'c' AND c.n = 1", NULL, D1,
     "[\"3\",\"4\"]"},
    {"SELECT VALUE c.id FROM c WHERE (c.pk = 'b' OR c.pk = 'c') AND c.n > 0", NULL, D1, "[\"5\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.missing = c.missing", NULL, D1, "[]"},
    {"SELECT VALUE c.id FROM c WHERE c.obj = {\"x\": 1, \"y\": \"z\"}", NULL, D1, "[\"1\",\"3\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.obj != {\"x\": 1, \"y\": \"z\"}", NULL, D1, "[\"2\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.arr = [3, 4]", NULL, D1, "[\"3\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.obj > {\"x\": 0}", NULL, D1, "[]"},
    {"SELECT VALUE c.id FROM c WHERE c.arr > []", NULL, D1, "[]"},
    {"SELECT VALUE c.id FROM c WHERE c.s > 'b'", NULL, D1, "[\"3\",\"4\",\"5\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.b > false", NULL, D1, "[\"1\"]"},
    {"SELECT VALUE [1 = 1.0, 'a' = 'a', null = null, [1,2] = [1,2], {} = {}, 'a' < 'b', "
     "null <= null, [1] != [1, 2]]",
     NULL, NODOCS, "[[true,true,true,true,true,true,true,true]]"},
    {"SELECT VALUE [IS_DEFINED(true = 1), IS_DEFINED(1 < 'a'), IS_DEFINED(undefined = "
     "undefined), IS_DEFINED(null < 1)]",
     NULL, NODOCS, "[[false,false,false,false]]"},
    {"SELECT VALUE true AND 1", NULL, NODOCS, "[]"},
    {"SELECT VALUE false AND 1", NULL, NODOCS, "[false]"},
    {"SELECT VALUE 1 AND false", NULL, NODOCS, "[false]"},
    {"SELECT VALUE true OR 1", NULL, NODOCS, "[true]"},
    {"SELECT VALUE 'x' OR true", NULL, NODOCS, "[true]"},
    {"SELECT VALUE false OR undefined", NULL, NODOCS, "[]"},
    {"SELECT VALUE NOT 1", NULL, NODOCS, "[]"},
    {"SELECT VALUE [1 < 2 AND 2 < 3, 1 > 2 OR 2 > 3, NOT false]", NULL, NODOCS,
     "[[true,false,true]]"},
    /* numbers are IEEE doubles, as in the service */
    {"SELECT VALUE 12345678901234567 = 12345678901234568", NULL, NODOCS, "[true]"},

    /* IN, BETWEEN, LIKE */
    {"SELECT VALUE c.id FROM c WHERE c.pk IN ('a', 'c')", NULL, D1, "[\"1\",\"2\",\"5\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.pk NOT IN ('a', 'c')", NULL, D1, "[\"3\",\"4\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.n IN (1, '10')", NULL, D1, "[\"1\",\"4\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.n NOT IN (1, 10)", NULL, D1, "[\"2\",\"3\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.missing NOT IN (1)", NULL, D1, "[]"},
    {"SELECT VALUE c.id FROM c WHERE c.obj IN ({\"x\": 2}, [])", NULL, D1, "[\"2\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.n BETWEEN 1 AND 3", NULL, D1, "[\"1\",\"2\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.n NOT BETWEEN 1 AND 3", NULL, D1, "[\"3\",\"5\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.s BETWEEN 'b' AND 'd'", NULL, D1, "[\"3\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.n BETWEEN 0 AND 100 AND c.pk = 'c'", NULL, D1, "[\"5\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.s LIKE 'a%'", NULL, D1, "[\"1\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.s LIKE '%a%'", NULL, D1, "[\"1\",\"2\",\"4\",\"5\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.s LIKE '_a%'", NULL, D1, "[\"2\",\"4\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.s LIKE '_clair'", NULL, D1, "[\"5\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.s NOT LIKE '%e%'", NULL, D1, "[\"2\",\"5\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.s LIKE '[a-c]%'", NULL, D1, "[\"1\",\"3\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.s LIKE '[^a-c]%'", NULL, D1, "[\"2\",\"4\",\"5\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.s LIKE 'apple'", NULL, D1, "[\"1\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.s LIKE 'appl'", NULL, D1, "[]"},
    {"SELECT VALUE ['a%b' LIKE 'a!%b' ESCAPE '!', 'axb' LIKE 'a!%b' ESCAPE '!', "
     "'ab' LIKE '%%b%', '[x' LIKE '[x', '' LIKE '%', 'abc' LIKE '%c%c']",
     NULL, NODOCS, "[[true,false,true,true,true,false]]"},
    {"SELECT VALUE 5 LIKE '5'", NULL, NODOCS, "[]"},

    /* conditional and coalesce */
    {"SELECT VALUE c.b ?? 'none' FROM c", NULL, D1, "[true,false,\"none\",\"none\",null]"},
    {"SELECT VALUE c.missing ?? c.other ?? 3 FROM c WHERE c.id = '1'", NULL, D1, "[3]"},
    {"SELECT VALUE (c.n > 2 ? 'big' : 'small') FROM c", NULL, D1,
     "[\"small\",\"big\",\"small\",\"small\",\"big\"]"},
    {"SELECT VALUE c.n > 2 ? 'big' : c.n > 0 ? 'pos' : 'neg' FROM c WHERE c.pk != 'b'", NULL, D1,
     "[\"pos\",\"big\",\"big\"]"},
    {"SELECT c.id, c.b ? 'yes' : undefined AS t FROM c WHERE c.pk = 'a'", NULL, D1,
     "[{\"id\":\"1\",\"t\":\"yes\"},{\"id\":\"2\"}]"},

    /* type-check functions */
    {"SELECT VALUE c.id FROM c WHERE IS_DEFINED(c.b)", NULL, D1, "[\"1\",\"2\",\"5\"]"},
    {"SELECT VALUE c.id FROM c WHERE NOT IS_DEFINED(c.b)", NULL, D1, "[\"3\",\"4\"]"},
    {"SELECT VALUE c.id FROM c WHERE IS_NULL(c.b)", NULL, D1, "[\"5\"]"},
    {"SELECT VALUE [IS_STRING('a'), IS_STRING(1), IS_NUMBER(1.5), IS_NUMBER('1'), "
     "IS_BOOL(false), IS_BOOL(null), IS_ARRAY([]), IS_ARRAY({}), IS_OBJECT({}), IS_OBJECT([]), "
     "IS_PRIMITIVE(null), IS_PRIMITIVE([]), IS_PRIMITIVE(undefined), IS_NULL(undefined), "
     "IS_DEFINED(null)]",
     NULL, NODOCS,
     "[[true,false,true,false,true,false,true,false,true,false,true,false,false,false,true]]"},
    {"SELECT VALUE [IS_INTEGER(3), IS_INTEGER(3.5), is_number(2), Is_Finite_Number(1)]", NULL,
     NODOCS, "[[true,false,true,true]]"},

    /* string functions */
    {"SELECT VALUE c.id FROM c WHERE STARTSWITH(c.s, 'b')", NULL, D1, "[]"},
    {"SELECT VALUE c.id FROM c WHERE STARTSWITH(c.s, 'b', true)", NULL, D1, "[\"2\"]"},
    {"SELECT VALUE c.id FROM c WHERE STARTSWITH(c.s, 'éc', true)", NULL, D1, "[\"5\"]"},
    {"SELECT VALUE c.id FROM c WHERE ENDSWITH(c.s, 'RY', true)", NULL, D1, "[\"3\"]"},
    {"SELECT VALUE c.id FROM c WHERE ENDSWITH(c.s, 'e')", NULL, D1, "[\"1\",\"4\"]"},
    {"SELECT VALUE c.id FROM c WHERE CONTAINS(c.s, 'an')", NULL, D1, "[\"2\"]"},
    {"SELECT VALUE c.id FROM c WHERE CONTAINS(c.s, 'AN', false)", NULL, D1, "[]"},
    {"SELECT VALUE [STARTSWITH('a', 'a', 'yes'), STARTSWITH(1, 'a'), CONTAINS('abc', '')]", NULL,
     NODOCS, "[[true]]"},
    {"SELECT VALUE [LOWER('AbC É'), UPPER('abc é'), LENGTH('héllo'), LENGTH('')]", NULL, NODOCS,
     "[[\"abc é\",\"ABC É\",5,0]]"},
    {"SELECT VALUE CONCAT('a', 'b', 'c')", NULL, NODOCS, "[\"abc\"]"},
    {"SELECT VALUE CONCAT('a', 1)", NULL, NODOCS, "[]"},
    {"SELECT VALUE [SUBSTRING('hello', 1, 3), SUBSTRING('héllo', 1, 2), SUBSTRING('abc', 5, 1), "
     "SUBSTRING('abc', 1, 100), SUBSTRING('abc', -1, 2), LEFT('abc', 2), RIGHT('abc', 2), "
     "RIGHT('abc', 5), LEFT('abc', -1)]",
     NULL, NODOCS, "[[\"ell\",\"él\",\"\",\"bc\",\"ab\",\"ab\",\"bc\",\"abc\",\"\"]]"},
    {"SELECT VALUE [INDEX_OF('abcabc', 'c'), INDEX_OF('abc', 'x'), INDEX_OF('héllo', 'l'), "
     "INDEX_OF('abcabc', 'c', 3), INDEX_OF('abc', ''), INDEX_OF('abc', 'a', 9)]",
     NULL, NODOCS, "[[2,-1,2,5,0,-1]]"},
    {"SELECT VALUE [TRIM('  a b  '), LTRIM('  a '), RTRIM(' a  '), TRIM('\\t\\n x')]", NULL, NODOCS,
     "[[\"a b\",\"a \",\" a\",\"x\"]]"},
    {"SELECT VALUE [REPLACE('a-b-c', '-', '+'), REPLACE('aaa', 'a', 'bb'), REPLACE('abc', '', "
     "'x'), REVERSE('héllo')]",
     NULL, NODOCS, "[[\"a+b+c\",\"bbbbbb\",\"abc\",\"olléh\"]]"},
    {"SELECT VALUE [TOSTRING(1), TOSTRING(2.5), TOSTRING(true), TOSTRING(null), TOSTRING('s'), "
     "TOSTRING([1,\"a\"]), TOSTRING({\"a\":1}), TOSTRING(-0.1), TOSTRING(1e21)]",
     NULL, NODOCS,
     "[[\"1\",\"2.5\",\"true\",\"null\",\"s\",\"[1,\\\"a\\\"]\",\"{\\\"a\\\":1}\",\"-0.1\","
     "\"1e+21\"]]"},
    {"SELECT VALUE TOSTRING(c.missing) FROM c WHERE c.id = '1'", NULL, D1, "[]"},
    {"SELECT VALUE STRINGEQUALS('abc', 'ABC', true)", NULL, NODOCS, "[true]"},
    {"SELECT VALUE STRINGEQUALS('abc', 'ABC')", NULL, NODOCS, "[false]"},
    {"SELECT VALUE Upper(c.s) FROM c WHERE c.id = '5'", NULL, D1, "[\"ÉCLAIR\"]"},
    {"SELECT VALUE LOWER(c.s) FROM c WHERE c.id = '5'", NULL, D1, "[\"éclair\"]"},
    {"SELECT VALUE LENGTH(c.n) FROM c", NULL, D1, "[2]"},

    /* array functions */
    {"SELECT VALUE c.id FROM c WHERE ARRAY_CONTAINS(c.tags, 'fruit')", NULL, D1, "[\"1\",\"2\"]"},
    {"SELECT VALUE c.id FROM c WHERE ARRAY_CONTAINS(c.items, {\"sku\": \"y\"}, true)", NULL, D1,
     "[\"4\"]"},
    {"SELECT VALUE c.id FROM c WHERE ARRAY_CONTAINS(c.items, {\"sku\": \"y\"})", NULL, D1, "[]"},
    {"SELECT VALUE c.id FROM c WHERE ARRAY_CONTAINS(c.items, {\"q\": 5, \"sku\": \"y\"})", NULL, D1,
     "[\"4\"]"},
    {"SELECT VALUE c.id FROM c WHERE ARRAY_CONTAINS(c.arr, 3.0)", NULL, D1, "[\"1\",\"3\"]"},
    {"SELECT VALUE [ARRAY_CONTAINS([1], undefined), ARRAY_CONTAINS('x', 'x')]", NULL, NODOCS,
     "[[false]]"},
    {"SELECT VALUE ARRAY_LENGTH(c.arr) FROM c", NULL, D1, "[3,0,2]"},
    {"SELECT VALUE [ARRAY_CONCAT([1], [2, 3]), ARRAY_SLICE([1,2,3,4], 1, 2), "
     "ARRAY_SLICE([1,2,3,4], -2), ARRAY_SLICE([1,2], 5), ARRAY_CONCAT([1], 2)]",
     NULL, NODOCS, "[[[1,2,3],[2,3],[3,4],[]]]"},

    /* math functions */
    {"SELECT VALUE [ABS(-2), FLOOR(2.7), CEILING(2.1), ROUND(2.5), ROUND(-2.5), ROUND(2.4), "
     "TRUNC(-2.7), SIGN(-3), SQRT(9), POWER(2, 10), SQRT(-1), FLOOR(-0.5)]",
     NULL, NODOCS, "[[2,2,3,3,-3,2,-2,-1,3,1024,-1]]"},
    {"SELECT VALUE ABS('x')", NULL, NODOCS, "[]"},

    /* parameters */
    {"SELECT VALUE c.id FROM c WHERE c.pk = @pk", "[{\"name\":\"@pk\",\"value\":\"b\"}]", D1,
     "[\"3\",\"4\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.n > @min AND c.pk IN (@a, @b)",
     "[{\"name\":\"@min\",\"value\":0},{\"name\":\"@a\",\"value\":\"a\"},"
     "{\"name\":\"@b\",\"value\":\"c\"}]",
     D1, "[\"1\",\"2\",\"5\"]"},
    {"SELECT VALUE @obj", "[{\"name\":\"@obj\",\"value\":{\"k\":[1]}}]", NODOCS, "[{\"k\":[1]}]"},
    {"SELECT VALUE IS_DEFINED(@u)", "[{\"name\":\"@u\"}]", NODOCS, "[false]"},
    {"SELECT VALUE @n", "[{\"name\":\"@n\",\"value\":null}]", NODOCS, "[null]"},
    {"SELECT TOP @n VALUE c.id FROM c", "[{\"name\":\"@n\",\"value\":2}]", D1, "[\"1\",\"2\"]"},
    {"SELECT VALUE c.id FROM c OFFSET @o LIMIT @l",
     "[{\"name\":\"@o\",\"value\":1},{\"name\":\"@l\",\"value\":2}]", D1, "[\"2\",\"3\"]"},
    {"SELECT VALUE c.id FROM c WHERE c.obj = @o",
     "[{\"name\":\"@o\",\"value\":{\"y\":\"z\",\"x\":1}}]", D1, "[\"1\",\"3\"]"},
    {"SELECT VALUE 1", "[]", NODOCS, "[1]"},
    {"SELECT VALUE 1", "null", NODOCS, "[1]"},

    /* DISTINCT */
    {"SELECT DISTINCT VALUE c.pk FROM c", NULL, D1, "[\"a\",\"b\",\"c\"]"},
    {"SELECT DISTINCT c.pk FROM c", NULL, D1, "[{\"pk\":\"a\"},{\"pk\":\"b\"},{\"pk\":\"c\"}]"},
    {"SELECT DISTINCT VALUE c.obj FROM c", NULL, D1, "[{\"x\":1,\"y\":\"z\"},{\"x\":2}]"},
    {"SELECT DISTINCT VALUE c.b FROM c", NULL, D1, "[true,false,null]"},
    {"SELECT DISTINCT VALUE c.v FROM c", NULL, "[{\"v\":1},{\"v\":1.0},{\"v\":-0.0},{\"v\":0}]",
     "[1,-0.0]"},
    {"SELECT DISTINCT VALUE c.tags FROM c", NULL, D1,
     "[[\"red\",\"fruit\"],[\"yellow\",\"fruit\"]]"},
    {"SELECT DISTINCT c.x FROM c", NULL, "[{\"x\":1},{},{\"x\":1},{\"y\":2}]", "[{\"x\":1},{}]"},
    {"SELECT DISTINCT TOP 2 VALUE c.pk FROM c", NULL, D1, "[\"a\",\"b\"]"},
    {"SELECT DISTINCT VALUE c.pk FROM c ORDER BY c.pk DESC", NULL, D1, "[\"c\",\"b\",\"a\"]"},
    {"SELECT DISTINCT VALUE c.pk FROM c OFFSET 1 LIMIT 5", NULL, D1, "[\"b\",\"c\"]"},

    /* TOP and OFFSET LIMIT */
    {"SELECT TOP 2 VALUE c.id FROM c", NULL, D1, "[\"1\",\"2\"]"},
    {"SELECT TOP 0 VALUE c.id FROM c", NULL, D1, "[]"},
    {"SELECT TOP 10 VALUE c.id FROM c WHERE c.pk = 'a'", NULL, D1, "[\"1\",\"2\"]"},
    {"SELECT TOP 2 c.id FROM c WHERE c.pk != 'a'", NULL, D1, "[{\"id\":\"3\"},{\"id\":\"4\"}]"},
    {"SELECT VALUE c.id FROM c OFFSET 1 LIMIT 2", NULL, D1, "[\"2\",\"3\"]"},
    {"SELECT VALUE c.id FROM c OFFSET 4 LIMIT 10", NULL, D1, "[\"5\"]"},
    {"SELECT VALUE c.id FROM c OFFSET 10 LIMIT 1", NULL, D1, "[]"},
    {"SELECT VALUE c.id FROM c OFFSET 0 LIMIT 0", NULL, D1, "[]"},
    {"SELECT VALUE c.id FROM c WHERE c.pk = 'b' OFFSET 1 LIMIT 1", NULL, D1, "[\"4\"]"},

    /* ORDER BY */
    {"SELECT VALUE c.id FROM c ORDER BY c.id DESC", NULL, D1, "[\"5\",\"4\",\"3\",\"2\",\"1\"]"},
    {"SELECT VALUE c.n FROM c ORDER BY c.n", NULL, D1, "[-3,1,2.5,10,\"10\"]"},
    {"SELECT VALUE c.n FROM c ORDER BY c.n ASC", NULL, D1, "[-3,1,2.5,10,\"10\"]"},
    {"SELECT VALUE c.n FROM c ORDER BY c.n DESC", NULL, D1, "[\"10\",10,2.5,1,-3]"},
    {"SELECT VALUE c.id FROM c ORDER BY c.b", NULL, D1, "[\"3\",\"4\",\"5\",\"2\",\"1\"]"},
    {"SELECT VALUE c.id FROM c ORDER BY c.b DESC", NULL, D1, "[\"1\",\"2\",\"5\",\"3\",\"4\"]"},
    {"SELECT VALUE c.id FROM c ORDER BY c.pk DESC, c.id ASC", NULL, D1,
     "[\"5\",\"3\",\"4\",\"1\",\"2\"]"},
    {"SELECT VALUE c.id FROM c ORDER BY c.pk, c.id DESC", NULL, D1,
     "[\"2\",\"1\",\"4\",\"3\",\"5\"]"},
    {"SELECT TOP 2 VALUE c.id FROM c ORDER BY c.s", NULL, D1, "[\"2\",\"1\"]"},
    {"SELECT VALUE c.id FROM c ORDER BY c.s OFFSET 1 LIMIT 2", NULL, D1, "[\"1\",\"3\"]"},
    {"SELECT c.id FROM c WHERE c.pk = 'a' ORDER BY c.n DESC", NULL, D1,
     "[{\"id\":\"2\"},{\"id\":\"1\"}]"},
    {"SELECT VALUE c.id FROM c ORDER BY LENGTH(c.s) DESC, c.id", NULL, D1,
     "[\"2\",\"3\",\"5\",\"1\",\"4\"]"},
    {"SELECT VALUE c.id FROM c ORDER BY c.obj", NULL, D1, "[\"4\",\"5\",\"2\",\"1\",\"3\"]"},
    {"SELECT VALUE c.id FROM c ORDER BY c.k", "[]",
     "[{\"id\":1,\"k\":1},{\"id\":2,\"k\":0},{\"id\":3,\"k\":1},{\"id\":4,\"k\":0}]", "[2,4,1,3]"},
    {"SELECT VALUE c.id FROM c ORDER BY c.v", NULL, D2,
     "[\"c\",\"d\",\"h\",\"e\",\"j\",\"b\",\"i\",\"a\",\"f\",\"g\"]"},
    {"SELECT VALUE c.id FROM c ORDER BY c.v DESC", NULL, D2,
     "[\"g\",\"f\",\"a\",\"i\",\"b\",\"j\",\"e\",\"h\",\"d\",\"c\"]"},
    {"SELECT VALUE c.v FROM c WHERE c.v > 0", NULL, D2, "[2]"},
    {"SELECT VALUE c.v FROM c WHERE c.v < 'b'", NULL, D2, "[\"a\"]"},

    /* aggregates */
    {"SELECT VALUE COUNT(1) FROM c", NULL, D1, "[5]"},
    {"SELECT COUNT(1) AS n FROM c", NULL, D1, "[{\"n\":5}]"},
    {"SELECT COUNT(1) FROM c", NULL, D1, "[{\"$1\":5}]"},
    {"SELECT VALUE COUNT(c.b) FROM c", NULL, D1, "[3]"},
    {"SELECT VALUE count(c.id) FROM c WHERE c.pk = 'b'", NULL, D1, "[2]"},
    {"SELECT VALUE SUM(c.n) FROM c", NULL, D1, "[]"},
    {"SELECT VALUE SUM(c.n) FROM c WHERE IS_NUMBER(c.n)", NULL, D1, "[10.5]"},
    {"SELECT VALUE AVG(c.n) FROM c WHERE IS_NUMBER(c.n)", NULL, D1, "[2.625]"},
    {"SELECT VALUE AVG(c.n) FROM c", NULL, D1, "[]"},
    {"SELECT VALUE MIN(c.n) FROM c", NULL, D1, "[-3]"},
    {"SELECT VALUE MAX(c.n) FROM c", NULL, D1, "[\"10\"]"},
    {"SELECT VALUE SUM(c.obj.x) FROM c", NULL, D1, "[4]"},
    {"SELECT VALUE MIN(c.v) FROM c WHERE NOT IS_ARRAY(c.v) AND NOT IS_OBJECT(c.v)", NULL, D2,
     "[null]"},
    {"SELECT VALUE MAX(c.v) FROM c WHERE NOT IS_ARRAY(c.v) AND NOT IS_OBJECT(c.v)", NULL, D2,
     "[\"b\"]"},
    {"SELECT VALUE MAX(c.v) FROM c", NULL, D2, "[]"},
    {"SELECT VALUE COUNT(1) FROM c WHERE false", NULL, D1, "[0]"},
    {"SELECT VALUE SUM(c.n) FROM c WHERE false", NULL, D1, "[0]"},
    {"SELECT VALUE AVG(c.n) FROM c WHERE false", NULL, D1, "[]"},
    {"SELECT VALUE MIN(c.n) FROM c WHERE false", NULL, D1, "[]"},
    {"SELECT VALUE MAX(c.n) FROM c", NULL, NODOCS, "[]"},
    {"SELECT COUNT(1) AS n, SUM(c.n) AS s, AVG(c.n) AS a FROM c WHERE c.id = 'zzz'", NULL, D1,
     "[{\"n\":0,\"s\":0}]"},
    {"SELECT COUNT(1) AS n, MAX(c.s) AS m FROM c WHERE c.pk = 'a'", NULL, D1,
     "[{\"n\":2,\"m\":\"apple\"}]"},
    {"SELECT VALUE COUNT(1) * 2 + 1 FROM c", NULL, D1, "[11]"},
    {"SELECT VALUE {\"n\": COUNT(1), \"s\": SUM(c.obj.x)} FROM c", NULL, D1, "[{\"n\":5,\"s\":4}]"},
    {"SELECT VALUE SUM(c.n) / COUNT(1) FROM c WHERE IS_NUMBER(c.n)", NULL, D1, "[2.625]"},
    {"SELECT VALUE COUNT(1)", NULL, NODOCS, "[1]"},
    {"SELECT DISTINCT VALUE COUNT(1) FROM c", NULL, D1, "[5]"},
    {"SELECT TOP 0 VALUE COUNT(1) FROM c", NULL, D1, "[]"},
    {"SELECT VALUE COUNT(1) FROM c OFFSET 1 LIMIT 1", NULL, D1, "[]"},
    {"SELECT VALUE SUM(c.q) FROM c", NULL, "[{\"q\":1},{\"q\":2.5},{\"q\":null}]", "[]"},
    /* GROUP BY: one row per key in order of first appearance; undefined is a key */
    {"SELECT c.pk, COUNT(1) AS n FROM c GROUP BY c.pk", NULL, D1,
     "[{\"pk\":\"a\",\"n\":2},{\"pk\":\"b\",\"n\":2},{\"pk\":\"c\",\"n\":1}]"},
    {"SELECT c.b, COUNT(1) AS n FROM c GROUP BY c.b", NULL, D1,
     "[{\"b\":true,\"n\":1},{\"b\":false,\"n\":1},{\"n\":2},{\"b\":null,\"n\":1}]"},
    {"SELECT VALUE COUNT(1) FROM c WHERE IS_DEFINED(c.pk) GROUP BY c.pk", NULL, D1, "[2,2,1]"},
    {"SELECT VALUE c.pk FROM c GROUP BY c.pk", NULL, D1, "[\"a\",\"b\",\"c\"]"},
    {"SELECT c.pk, MAX(c.s) AS m, SUM(c.n) AS t FROM c WHERE c.pk = 'a' GROUP BY c.pk", NULL, D1,
     "[{\"pk\":\"a\",\"m\":\"apple\",\"t\":3.5}]"},
    {"SELECT LOWER(c.pk) AS k FROM c WHERE IS_DEFINED(c.pk) GROUP BY LOWER(c.pk)", NULL, D1,
     "[{\"k\":\"a\"},{\"k\":\"b\"},{\"k\":\"c\"}]"},
    {"SELECT [{\"item\": c.pk}] AS groupByItems, {\"n\": {\"item\": COUNT(1)}} AS payload "
     "FROM c WHERE c.pk = 'b' GROUP BY c.pk",
     NULL, D1, "[{\"groupByItems\":[{\"item\":\"b\"}],\"payload\":{\"n\":{\"item\":2}}}]"},
    {"SELECT c.pk FROM c GROUP BY c.pk OFFSET 1 LIMIT 5", NULL, D1,
     "[{\"pk\":\"b\"},{\"pk\":\"c\"}]"},
    {"SELECT VALUE COUNT(1) FROM c WHERE false GROUP BY c.pk", NULL, D1, "[]"},
};

START_TEST(test_result_case)
{
    const struct qcase *c = &result_cases[_i];

    assert_result(c->query, c->params, c->docs, c->expect);
}
END_TEST

/* ---- error cases ---------------------------------------------------------------------- */

struct qerr_case {
    const char *query;
    const char *params;
    enum sf_rc rc;
    const char *msg; /* must appear in err.msg */
};

static const struct qerr_case error_cases[] = {
    {"SELECT * FRM c", NULL, SF_EINVAL,
     "syntax error at position 10: expected FROM, WHERE, ORDER BY, OFFSET or end of query, "
     "found 'FRM'"},
    {"SELECT * FROM c WHERE", NULL, SF_EINVAL,
     "syntax error at position 22: expected an expression, found end of query"},
    {"SELECT c.id FROM c WHERE c.id = 'x", NULL, SF_EINVAL,
     "position 33: unterminated string literal"},
    {"SELECT FOO(c.id) FROM c", NULL, SF_EINVAL, "position 8: unknown function 'FOO'"},
    {"SELECT VALUE c.id FROM c WHERE c.pk = @pk", NULL, SF_EINVAL,
     "position 39: parameter '@pk' is not bound"},
    {"SELECT VALUE c.id FROM c WHERE c.pk = @pk", "[{\"name\":\"@other\",\"value\":1}]", SF_EINVAL,
     "parameter '@pk' is not bound"},
    {"SELECT VALUE x.id FROM c", NULL, SF_EINVAL,
     "position 14: identifier 'x' could not be resolved"},
    {"SELECT VALUE c.id FROM root r", NULL, SF_EINVAL, "identifier 'c' could not be resolved"},
    {"SELECT VALUE c.id", NULL, SF_EINVAL, "(the query has no FROM clause)"},
    {"SELECT VALUE c.value FROM c", NULL, SF_EINVAL,
     "position 16: 'value' is a reserved word; write [\"value\"]"},
    {"SELECT VALUE c.order FROM c", NULL, SF_EINVAL, "'order' is a reserved word"},
    {"SELECT VALUE c. FROM c", NULL, SF_EINVAL, "'FROM' is a reserved word"},
    {"SELECT VALUE c.1 FROM c", NULL, SF_EINVAL, "found '.1'"},
    {"SELECT VALUE c.@p FROM c", NULL, SF_EINVAL, "expected a property name after '.'"},
    {"SELECT VALUE TRUE", NULL, SF_EINVAL, "identifier 'TRUE' could not be resolved (true, false"},
    {"SELECT *", NULL, SF_EINVAL, "SELECT * needs a FROM clause"},
    {"SELECT VALUE c.id FROM c WHERE COUNT(1) > 1", NULL, SF_EINVAL,
     "position 32: aggregate function COUNT is not allowed in WHERE"},
    {"SELECT VALUE c.id FROM c ORDER BY MAX(c.id)", NULL, SF_EINVAL,
     "aggregate function MAX is not allowed in ORDER BY"},
    {"SELECT VALUE COUNT(SUM(c.n)) FROM c", NULL, SF_EINVAL, "cannot be nested"},
    {"SELECT c.id, COUNT(1) FROM c", NULL, SF_EINVAL,
     "position 8: a document reference in a select list with aggregates must be inside"},
    {"SELECT VALUE COUNT(1) + c.n FROM c", NULL, SF_EINVAL, "position 25: a document reference"},
    {"SELECT VALUE COUNT(1) FROM c ORDER BY c.id", NULL, SF_EINVAL,
     "ORDER BY cannot be combined with aggregate functions"},
    {"SELECT TOP 2 * FROM c OFFSET 1 LIMIT 1", NULL, SF_EINVAL, "cannot be combined with TOP"},
    {"SELECT TOP -1 * FROM c", NULL, SF_EINVAL, "expected a number or a parameter, found '-'"},
    {"SELECT TOP 1.5 * FROM c", NULL, SF_EINVAL, "position 12: TOP expects a non-negative integer"},
    {"SELECT TOP @n * FROM c", "[{\"name\":\"@n\",\"value\":\"x\"}]", SF_EINVAL,
     "TOP expects a non-negative integer"},
    {"SELECT * FROM c OFFSET -1 LIMIT 1", NULL, SF_EINVAL, "expected a number or a parameter"},
    {"SELECT * FROM c OFFSET 1", NULL, SF_EINVAL, "expected LIMIT, found end of query"},
    {"SELECT * FROM c OFFSET 1 LIMIT @l", "[{\"name\":\"@l\",\"value\":-2}]", SF_EINVAL,
     "LIMIT expects a non-negative integer"},
    {"SELECT c.a, c.a FROM c", NULL, SF_EINVAL,
     "position 13: the output property name 'a' is used more than once"},
    {"SELECT c.a, c.b AS a FROM c", NULL, SF_EINVAL, "name 'a' is used more than once"},
    {"SELECT 1, 2 AS $1", NULL, SF_EINVAL, "unexpected character '$'"},
    {"SELECT * FROM c JOIN t IN c.tags", NULL, SF_EINVAL, "position 17: JOIN is not supported"},
    {"SELECT * FROM c GROUP BY c.pk", NULL, SF_EINVAL, "SELECT * cannot be combined with GROUP BY"},
    {"SELECT c.id, COUNT(1) AS n FROM c GROUP BY c.pk", NULL, SF_EINVAL,
     "position 8: a document reference in a select list with GROUP BY must be one of"},
    {"SELECT c.pk FROM c GROUP BY c.pk ORDER BY c.pk", NULL, SF_EINVAL,
     "ORDER BY cannot be combined with GROUP BY"},
    {"SELECT c.pk FROM c GROUP BY COUNT(1)", NULL, SF_EINVAL,
     "aggregate function COUNT is not allowed in GROUP BY"},
    {"SELECT 1 GROUP BY 1", NULL, SF_EINVAL, "GROUP BY needs a FROM clause"},
    {"SELECT * FROM t IN c.tags", NULL, SF_EINVAL, "iteration is not supported"},
    {"SELECT * FROM c.children", NULL, SF_EINVAL, "FROM over a path"},
    {"SELECT * FROM (SELECT * FROM c)", NULL, SF_EINVAL, "subqueries in FROM are not supported"},
    {"SELECT VALUE LOWER()", NULL, SF_EINVAL, "function LOWER needs at least 1 argument, got 0"},
    {"SELECT VALUE LOWER('a', 'b')", NULL, SF_EINVAL, "function LOWER takes at most 1 argument"},
    {"SELECT VALUE STARTSWITH('a')", NULL, SF_EINVAL, "needs at least 2 arguments"},
    {"SELECT VALUE 'a' ! 'b'", NULL, SF_EINVAL, "position 18: unexpected '!'"},
    {"SELECT VALUE 1e", NULL, SF_EINVAL, "exponent without digits"},
    {"SELECT VALUE 12abc", NULL, SF_EINVAL, "position 14: malformed number"},
    {"SELECT VALUE \"\\x\"", NULL, SF_EINVAL, "invalid escape sequence '\\x'"},
    {"SELECT VALUE \"\\u12\"", NULL, SF_EINVAL, "four hex digits"},
    {"SELECT VALUE \"\\ud800\"", NULL, SF_EINVAL, "unpaired high surrogate"},
    {"SELECT VALUE \"\\udc00\"", NULL, SF_EINVAL, "unpaired low surrogate"},
    {"SELECT VALUE 'a\nb'", NULL, SF_EINVAL, "control character 0x0a"},
    {"SELECT VALUE '\xff'", NULL, SF_EINVAL, "position 15: invalid UTF-8"},
    {"SELECT VALUE '\xc0\x80'", NULL, SF_EINVAL, "invalid UTF-8"},
    {"SELECT VALUE 1 \xe2\x80\xa2", NULL, SF_EINVAL, "unexpected byte 0xe2"},
    {"SELECT VALUE {a: 1}", NULL, SF_EINVAL, "expected a property name in quotes, found 'a'"},
    {"SELECT VALUE {\"a\": 1, \"a\": 2}", NULL, SF_EINVAL, "appears twice in an object literal"},
    {"SELECT VALUE {\"a\" 1}", NULL, SF_EINVAL, "expected ':', found '1'"},
    {"SELECT VALUE (1 + 2", NULL, SF_EINVAL, "expected ')', found end of query"},
    {"SELECT VALUE [1, 2", NULL, SF_EINVAL, "expected ',' or ']'"},
    {"SELECT VALUE c.a[1 FROM c", NULL, SF_EINVAL, "expected ']'"},
    {"SELECT VALUE ABS(1", NULL, SF_EINVAL, "expected ',' or ')'"},
    {"SELECT * FROM c WHERE EXISTS(SELECT 1)", NULL, SF_EINVAL,
     "subqueries (EXISTS(...)) are not supported"},
    {"SELECT VALUE (SELECT 1)", NULL, SF_EINVAL, "subqueries are not supported"},
    {"SELECT * FROM c WHERE c.id IN (SELECT 1)", NULL, SF_EINVAL,
     "expected an expression, found keyword 'SELECT'"},
    {"SELECT * FROM c WHERE udf.(c)", NULL, SF_EINVAL, "the name of a user-defined function"},
    {"SELECT * FROM c WHERE c.a = 1 ORDER c.a", NULL, SF_EINVAL, "expected BY, found 'c'"},
    {"SELECT * FROM c ORDER BY RANK x", NULL, SF_EINVAL, "ORDER BY RANK is not supported"},
    {"", NULL, SF_EINVAL, "the query text is empty"},
    {"  \n\t ", NULL, SF_EINVAL, "the query text is empty"},
    {"SELECT VALUE @", NULL, SF_EINVAL, "'@' must be followed by a parameter name"},
    {"SELECT VALUE 1", "{\"a\":1}", SF_EINVAL, "query parameters must be a JSON array"},
    {"SELECT VALUE 1", "[{\"value\":1}]", SF_EINVAL,
     "query parameter 1 must be an object with a \"name\""},
    {"SELECT VALUE 1", "[{\"name\":\"x\",\"value\":1}]", SF_EINVAL, "starting with '@'"},
    {"SELECT VALUE 1", "[5]", SF_EINVAL, "query parameter 1 must be an object"},
    {"SELECT VALUE 1", "[{\"name\":\"@a\",\"value\":1},{\"name\":\"@a\",\"value\":2}]", SF_EINVAL,
     "query parameter '@a' is given more than once"},
    {"SELECT VALUE 1e999", NULL, SF_EINVAL, "position 14: number out of range"},
    {"SELECT VALUE *", NULL, SF_EINVAL, "SELECT VALUE needs an expression, not '*'"},
    {"SELECT * FROM c WHERE c.s LIKE 'a' ESCAPE 'ab'", NULL, SF_EINVAL,
     "the ESCAPE string must be exactly one character"},
    {"SELECT * FROM c WHERE c.s LIKE 'a' ESCAPE 1", NULL, SF_EINVAL, "expected a string after"},
    {"SELECT VALUE c.id FROM c WHERE c.id = 1 c.x", NULL, SF_EINVAL,
     "position 41: expected GROUP BY, ORDER BY, OFFSET or end of query, found 'c'"},
    {"SELECT c.id c.x FROM c", NULL, SF_EINVAL,
     "position 13: expected ',', FROM, WHERE, ORDER BY, OFFSET or end of query"},
    {"SELECT * FROM c ORDER BY c.a LIMIT 1", NULL, SF_EINVAL,
     "expected OFFSET or end of query, found keyword 'LIMIT'"},
    {"SELECT * FROM c OFFSET 1 LIMIT 1 ORDER BY c.a", NULL, SF_EINVAL,
     "expected end of query, found keyword 'ORDER'"},
    {"SELECT VALUE 1 ? 2", NULL, SF_EINVAL, "expected ':' of the conditional operator"},
    {"SELECT VALUE 1 FROM c AS", NULL, SF_EINVAL, "expected an alias after AS"},
    {"SELECT c.id AS FROM FROM c", NULL, SF_EINVAL,
     "expected an alias after AS, found keyword 'FROM'"},
    {"SELECT * FROM c WHERE NOT", NULL, SF_EINVAL, "expected an expression"},
    {"SELECT * FROM c WHERE c.a IN 1", NULL, SF_EINVAL, "expected '(' after IN"},
    {"SELECT * FROM c WHERE c.a BETWEEN 1 OR 2", NULL, SF_EINVAL, "expected AND, found keyword"},
    {"SELECT DISTINCT", NULL, SF_EINVAL, "expected an expression, found end of query"},
    {"UPDATE c SET x = 1", NULL, SF_EINVAL, "position 1: expected SELECT, found 'UPDATE'"},
    {"SELECT VALUE 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' x", NULL,
     SF_EINVAL, "found 'x'"},
    {"SELECT VALUE 1 FROM c WHERE c.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa = 1 "
     "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
     NULL, SF_EINVAL, "found 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb...'"},
};

START_TEST(test_error_case)
{
    const struct qerr_case *c = &error_cases[_i];
    struct sf_err err;
    json_t *rows = run_query(c->query, c->params, NODOCS, &err);

    ck_assert_msg(rows == NULL, "query '%s' should fail", c->query);
    ck_assert_msg(err.rc == c->rc, "query '%s': rc %d, want %d (%s)", c->query, err.rc, c->rc,
                  err.msg);
    ck_assert_int_eq(err.http_status, 400);
    ck_assert_msg(strstr(err.msg, c->msg) != NULL, "query '%s'\n  message '%s'\n  lacks   '%s'",
                  c->query, err.msg, c->msg);
}
END_TEST

/* ---- streaming API, windows and paging ----------------------------------------------- */

static struct emu_query *must_parse(const char *text, const struct emu_query_limits *lim)
{
    struct emu_query *q = NULL;
    struct sf_err err;

    sf_err_clear(&err);
    ck_assert_msg(emu_query_parse(text, NULL, lim, &q, &err) == SF_OK, "parse '%s': %s", text,
                  err.msg);
    return q;
}

/* Runs q over docs with a window; returns rows, sets *more and *added (docs consumed). */
static json_t *run_window(const struct emu_query *q, json_t *docs, size_t skip, size_t max,
                          bool *more, size_t *added)
{
    struct emu_query_exec *e = NULL;
    struct sf_err err;
    json_t *rows = NULL, *doc;
    size_t i;

    ck_assert_int_eq(emu_query_exec_new(q, skip, max, &e, &err), SF_OK);
    *added = 0;
    json_array_foreach(docs, i, doc)
    {
        if (emu_query_exec_done(e))
            break;
        ck_assert_int_eq(emu_query_exec_add(e, doc, &err), SF_OK);
        (*added)++;
    }
    ck_assert_msg(emu_query_exec_finish(e, &rows, more, &err) == SF_OK, "%s", err.msg);
    emu_query_exec_free(e);
    return rows;
}

static void assert_json(json_t *got, const char *want_text)
{
    json_t *want = parse_json(want_text);
    char *g = json_dumps(got, JSON_COMPACT | JSON_ENCODE_ANY);

    ck_assert_msg(json_equal(got, want), "got %s, want %s", g, want_text);
    free(g);
    json_decref(want);
}

START_TEST(test_window_streaming)
{
    struct emu_query *q = must_parse("SELECT VALUE c.id FROM c", NULL);
    json_t *docs = parse_json(D1), *rows;
    bool more = false;
    size_t added;

    ck_assert(emu_query_is_streaming(q));
    rows = run_window(q, docs, 1, 2, &more, &added);
    assert_json(rows, "[\"2\",\"3\"]");
    ck_assert(more);
    ck_assert_uint_eq(added, 4); /* stops after the first row past the window */
    json_decref(rows);
    rows = run_window(q, docs, 3, 2, &more, &added);
    assert_json(rows, "[\"4\",\"5\"]");
    ck_assert(!more);
    json_decref(rows);
    rows = run_window(q, docs, 7, 2, &more, &added);
    assert_json(rows, "[]");
    ck_assert(!more);
    json_decref(rows);
    json_decref(docs);
    emu_query_free(q);
}
END_TEST

START_TEST(test_window_top_stops_early)
{
    struct emu_query *q = must_parse("SELECT TOP 3 VALUE c.id FROM c", NULL);
    json_t *docs = parse_json(D1), *rows;
    bool more = true;
    size_t added;

    rows = run_window(q, docs, 2, 5, &more, &added);
    assert_json(rows, "[\"3\"]");
    ck_assert(!more);
    ck_assert_uint_eq(added, 3);
    json_decref(rows);
    json_decref(docs);
    emu_query_free(q);
}
END_TEST

START_TEST(test_window_order_by)
{
    struct emu_query *q = must_parse("SELECT VALUE c.id FROM c ORDER BY c.id DESC", NULL);
    json_t *docs = parse_json(D1), *rows;
    bool more = false;
    size_t added;

    ck_assert(!emu_query_is_streaming(q));
    rows = run_window(q, docs, 1, 2, &more, &added);
    assert_json(rows, "[\"4\",\"3\"]");
    ck_assert(more);
    ck_assert_uint_eq(added, 5); /* ORDER BY must see every document */
    json_decref(rows);
    rows = run_window(q, docs, 3, 10, &more, &added);
    assert_json(rows, "[\"2\",\"1\"]");
    ck_assert(!more);
    json_decref(rows);
    json_decref(docs);
    emu_query_free(q);
}
END_TEST

/* Paging with a continuation offset gives exactly the one-shot result. */
START_TEST(test_paging_matches_full_result)
{
    static const char *const queries[] = {
        "SELECT VALUE c.id FROM c",
        "SELECT * FROM c WHERE c.pk != 'c'",
        "SELECT VALUE c.id FROM c ORDER BY c.b DESC, c.s",
        "SELECT DISTINCT VALUE c.pk FROM c",
        "SELECT VALUE c.id FROM c OFFSET 1 LIMIT 3",
        "SELECT TOP 4 c.id, c.n FROM c ORDER BY c.n",
        "SELECT VALUE COUNT(1) FROM c",
        "SELECT DISTINCT VALUE c.obj FROM c ORDER BY c.id DESC",
    };
    json_t *docs = parse_json(D1);
    struct sf_err err;

    for (size_t qi = 0; qi < SF_ARRAY_LEN(queries); qi++) {
        struct emu_query *q = must_parse(queries[qi], NULL);
        json_t *full = NULL, *paged = json_array();
        ck_assert_int_eq(emu_query_run(q, docs, &full, &err), SF_OK);
        for (size_t page = 1; page <= 3; page++) {
            size_t skip = 0;
            bool more = true;
            json_array_clear(paged);
            while (more) {
                size_t added;
                json_t *rows = run_window(q, docs, skip, page, &more, &added);
                ck_assert_uint_le(json_array_size(rows), page);
                ck_assert(json_array_size(rows) > 0 || !more);
                json_array_extend(paged, rows);
                skip += json_array_size(rows);
                json_decref(rows);
            }
            ck_assert_msg(json_equal(full, paged), "paging '%s' by %zu differs", queries[qi], page);
        }
        json_decref(full);
        json_decref(paged);
        emu_query_free(q);
    }
    json_decref(docs);
}
END_TEST

START_TEST(test_exec_state)
{
    struct emu_query *q = must_parse("SELECT TOP 1 VALUE c.id FROM c", NULL);
    struct emu_query_exec *e = NULL;
    json_t *doc = parse_json("{\"id\":\"x\"}"), *rows = NULL, *rows2 = NULL;
    struct sf_err err;
    bool more = true;

    ck_assert_int_eq(emu_query_exec_new(q, 0, 0, &e, &err), SF_OK);
    ck_assert(!emu_query_exec_done(e));
    ck_assert_int_eq(emu_query_exec_add(e, NULL, &err), SF_OK); /* ignored */
    ck_assert_int_eq(emu_query_exec_add(e, doc, &err), SF_OK);
    ck_assert(emu_query_exec_done(e));
    ck_assert_int_eq(emu_query_exec_add(e, doc, &err), SF_OK); /* after done: ignored */
    ck_assert_int_eq(emu_query_exec_finish(e, &rows, &more, &err), SF_OK);
    assert_json(rows, "[\"x\"]");
    ck_assert(!more);
    ck_assert_int_eq(emu_query_exec_finish(e, &rows2, NULL, &err), SF_ESTATE);
    ck_assert_ptr_null(rows2);
    emu_query_exec_free(e);
    emu_query_exec_free(NULL);
    emu_query_free(NULL);
    json_decref(rows);
    json_decref(doc);
    emu_query_free(q);
}
END_TEST

/* Rows keep references into documents: the caller may drop its own at once. */
START_TEST(test_exec_rows_outlive_docs)
{
    struct emu_query *q = must_parse("SELECT c.o FROM c ORDER BY c.k", NULL);
    struct emu_query_exec *e = NULL;
    struct sf_err err;
    json_t *rows = NULL;

    ck_assert_int_eq(emu_query_exec_new(q, 0, 0, &e, &err), SF_OK);
    for (int i = 3; i > 0; i--) {
        json_t *doc = json_pack("{s:i,s:{s:i}}", "k", i, "o", "v", i);
        ck_assert_int_eq(emu_query_exec_add(e, doc, &err), SF_OK);
        json_decref(doc);
    }
    ck_assert_int_eq(emu_query_exec_finish(e, &rows, NULL, &err), SF_OK);
    emu_query_exec_free(e);
    assert_json(rows, "[{\"o\":{\"v\":1}},{\"o\":{\"v\":2}},{\"o\":{\"v\":3}}]");
    json_decref(rows);
    emu_query_free(q);
}
END_TEST

/* ---- patch conditions and WHERE-only matching -------------------------------------- */

static bool condition_matches(const char *cond, const char *doc_text)
{
    struct emu_query *q = NULL;
    struct sf_err err;
    json_t *doc = parse_json(doc_text);
    bool match = false;

    ck_assert_msg(emu_query_parse_condition(cond, NULL, &q, &err) == SF_OK, "'%s': %s", cond,
                  err.msg);
    ck_assert_int_eq(emu_query_match(q, doc, &match, &err), SF_OK);
    emu_query_free(q);
    json_decref(doc);
    return match;
}

START_TEST(test_condition_match)
{
    ck_assert(condition_matches("FROM c WHERE c.status = 'Pending'", "{\"status\":\"Pending\"}"));
    ck_assert(!condition_matches("FROM c WHERE c.status = 'Pending'", "{\"status\":\"Paid\"}"));
    ck_assert(!condition_matches("FROM c WHERE c.status = 'Pending'", "{}"));
    ck_assert(condition_matches("from c where c.stock >= 2", "{\"stock\":2}"));
    ck_assert(!condition_matches("from c where c.stock >= 2", "{\"stock\":1}"));
    ck_assert(!condition_matches("from c where c.stock >= 2", "{\"stock\":\"9\"}"));
    ck_assert(condition_matches("FROM c", "{}"));
    ck_assert(condition_matches("FROM root r WHERE r.a.b = [1]", "{\"a\":{\"b\":[1]}}"));
    ck_assert(condition_matches("FROM c AS x WHERE NOT IS_DEFINED(x.lock)", "{\"a\":1}"));
    ck_assert(condition_matches("  FROM c WHERE c.n BETWEEN 1 AND 3 AND STARTSWITH(c.id, 'o') ",
                                "{\"n\":2,\"id\":\"order-1\"}"));
}
END_TEST

START_TEST(test_condition_errors)
{
    static const struct {
        const char *text;
        const char *msg;
    } bad[] = {
        {"SELECT * FROM c WHERE c.a = 1", "position 1: expected FROM, found keyword 'SELECT'"},
        {"c WHERE c.a = 1", "expected FROM, found 'c'"},
        {"FROM c WHERE", "expected an expression"},
        {"FROM c WHERE c.a = 1 ORDER BY c.a", "expected end of condition, found keyword 'ORDER'"},
        {"FROM c c.a = 1", "expected WHERE or end of condition"},
        {"FROM c WHERE d.a = 1", "identifier 'd' could not be resolved"},
        {"FROM c WHERE COUNT(1) = 1", "not allowed in WHERE"},
        {"", "empty"},
    };
    struct emu_query *q = NULL;
    struct sf_err err;

    for (size_t i = 0; i < SF_ARRAY_LEN(bad); i++) {
        sf_err_clear(&err);
        ck_assert_int_eq(emu_query_parse_condition(bad[i].text, NULL, &q, &err), SF_EINVAL);
        ck_assert_ptr_null(q);
        ck_assert_int_eq(err.http_status, 400);
        ck_assert_msg(strstr(err.msg, bad[i].msg) != NULL, "'%s': '%s' lacks '%s'", bad[i].text,
                      err.msg, bad[i].msg);
    }
}
END_TEST

START_TEST(test_match_full_query)
{
    struct emu_query *q = must_parse("SELECT TOP 1 c.id FROM c WHERE c.a > 1 ORDER BY c.id", NULL);
    struct emu_query *all = must_parse("SELECT * FROM c", NULL);
    json_t *yes = parse_json("{\"a\":2}"), *no = parse_json("{\"a\":\"2\"}");
    struct sf_err err;
    bool m = false;

    ck_assert_int_eq(emu_query_match(q, yes, &m, &err), SF_OK);
    ck_assert(m);
    ck_assert_int_eq(emu_query_match(q, no, &m, &err), SF_OK);
    ck_assert(!m);
    ck_assert_int_eq(emu_query_match(all, no, &m, &err), SF_OK);
    ck_assert(m);
    json_decref(yes);
    json_decref(no);
    emu_query_free(q);
    emu_query_free(all);
}
END_TEST

/* ---- query plans ----------------------------------------------------------------------- */

static json_t *plan_of(const char *text, enum emu_query_plan_kind kind)
{
    struct emu_query *q = must_parse(text, NULL);
    struct sf_err err;
    json_t *plan = NULL;

    ck_assert_int_eq(emu_query_plan(q, kind, &plan, &err), SF_OK);
    emu_query_free(q);
    return plan;
}

static void assert_info(json_t *plan, const char *key, const char *want_text)
{
    json_t *got = json_object_get(json_object_get(plan, "queryInfo"), key);
    json_t *want = parse_json(want_text);
    char *g = json_dumps(got, JSON_COMPACT | JSON_ENCODE_ANY);

    ck_assert_msg(got != NULL && json_equal(got, want), "queryInfo.%s is %s, want %s", key,
                  g != NULL ? g : "(absent)", want_text);
    free(g);
    json_decref(want);
}

START_TEST(test_plan_passthrough)
{
    json_t *p = plan_of("SELECT DISTINCT TOP 5 VALUE c.a FROM c ORDER BY c.a DESC",
                        EMU_QUERY_PLAN_PASSTHROUGH);

    ck_assert_int_eq(json_integer_value(json_object_get(p, "partitionedQueryExecutionInfoVersion")),
                     2);
    assert_info(p, "distinctType", "\"None\"");
    assert_info(p, "top", "null");
    assert_info(p, "offset", "null");
    assert_info(p, "limit", "null");
    assert_info(p, "orderBy", "[]");
    assert_info(p, "orderByExpressions", "[]");
    assert_info(p, "aggregates", "[]");
    assert_info(p, "groupByExpressions", "[]");
    assert_info(p, "groupByAliasToAggregateType", "{}");
    assert_info(p, "rewrittenQuery", "\"\"");
    assert_info(p, "hasSelectValue", "true");
    assert_info(p, "dCountInfo", "null");
    assert_json(json_object_get(p, "queryRanges"),
                "[{\"min\":\"\",\"max\":\"FF\",\"isMinInclusive\":true,\"isMaxInclusive\":false}]");
    json_decref(p);
}
END_TEST

START_TEST(test_plan_describe)
{
    json_t *p = plan_of("SELECT TOP 5 * FROM c ORDER BY c.a DESC, LOWER(c[\"b\"])",
                        EMU_QUERY_PLAN_DESCRIBE);

    assert_info(p, "top", "5");
    assert_info(p, "orderBy", "[\"Descending\",\"Ascending\"]");
    assert_info(p, "orderByExpressions", "[\"c.a\",\"LOWER(c[\\\"b\\\"])\"]");
    assert_info(p, "distinctType", "\"None\"");
    assert_info(p, "hasSelectValue", "false");
    json_decref(p);
    p = plan_of("SELECT DISTINCT VALUE c.a FROM c", EMU_QUERY_PLAN_DESCRIBE);
    assert_info(p, "distinctType", "\"Unordered\"");
    json_decref(p);
    p = plan_of("SELECT DISTINCT VALUE c.a FROM c ORDER BY c.a", EMU_QUERY_PLAN_DESCRIBE);
    assert_info(p, "distinctType", "\"Ordered\"");
    json_decref(p);
    p = plan_of("SELECT VALUE COUNT(1) FROM c", EMU_QUERY_PLAN_DESCRIBE);
    assert_info(p, "aggregates", "[\"Count\"]");
    assert_info(p, "hasSelectValue", "true");
    json_decref(p);
    p = plan_of("SELECT COUNT(1) AS n, AVG(c.x) AS a, MIN(c.x) AS lo FROM c",
                EMU_QUERY_PLAN_DESCRIBE);
    assert_info(p, "groupByAliasToAggregateType",
                "{\"n\":\"Count\",\"a\":\"Average\",\"lo\":\"Min\"}");
    assert_info(p, "aggregates", "[]");
    json_decref(p);
    p = plan_of("SELECT * FROM c OFFSET 3 LIMIT 7", EMU_QUERY_PLAN_DESCRIBE);
    assert_info(p, "offset", "3");
    assert_info(p, "limit", "7");
    assert_info(p, "top", "null");
    json_decref(p);
}
END_TEST

static json_t *gateway_plan_of(const char *text, bool composite)
{
    struct emu_query *q = must_parse(text, NULL);
    struct sf_err err;
    json_t *plan = NULL;

    ck_assert_int_eq(emu_query_plan_gateway(q, composite, &plan, &err), SF_OK);
    emu_query_free(q);
    return plan;
}

/* The rewritten per-range query, exactly, and that the engine runs it. */
static void assert_rewrite(const char *text, bool composite, const char *want)
{
    json_t *p = gateway_plan_of(text, composite);
    const char *got =
        json_string_value(json_object_get(json_object_get(p, "queryInfo"), "rewrittenQuery"));
    char *runnable = NULL;

    ck_assert_msg(got != NULL && strcmp(got, want) == 0, "%s\n  rewrites to %s\n  not %s", text,
                  got, want);
    if (*want) {
        /* The SDKs replace the placeholder with "true" (or a resume filter). */
        const char *ph = strstr(want, "{documentdb-formattableorderbyquery-filter}");
        size_t at = ph ? (size_t)(ph - want) : strlen(want);
        size_t n = strlen(want) + 8;
        runnable = malloc(n);
        ck_assert_ptr_nonnull(runnable);
        (void)snprintf(runnable, n, "%.*s%s%s", (int)at, want, ph ? "true" : "",
                       ph ? ph + strlen("{documentdb-formattableorderbyquery-filter}") : "");
        struct sf_err err;
        json_t *rows = run_query(runnable, NULL, D1, &err);
        ck_assert_msg(rows != NULL, "%s does not run: %s", runnable, err.msg);
        json_decref(rows);
    }
    free(runnable);
    json_decref(p);
}

START_TEST(test_plan_gateway_rewrites_per_range_queries)
{
    assert_rewrite(
        "SELECT c.id FROM c WHERE c.n > 1 ORDER BY c.s DESC, c.id", true,
        "SELECT c._rid, [{\"item\": c.s}, {\"item\": c.id}] AS orderByItems, "
        "{\"id\": c.id} AS payload FROM c WHERE "
        "({documentdb-formattableorderbyquery-filter}) AND (c.n > 1) ORDER BY c.s DESC, c.id");
    assert_rewrite(
        "SELECT TOP 3 * FROM root r ORDER BY r.n", true,
        "SELECT TOP 3 r._rid, [{\"item\": r.n}] AS orderByItems, r AS payload FROM root r "
        "WHERE ({documentdb-formattableorderbyquery-filter}) ORDER BY r.n");
    assert_rewrite("SELECT DISTINCT VALUE c.s FROM c ORDER BY c.s", true,
                   "SELECT DISTINCT [{\"item\": c.s}] AS orderByItems, c.s AS payload FROM c WHERE "
                   "({documentdb-formattableorderbyquery-filter}) ORDER BY c.s");
    assert_rewrite("SELECT VALUE COUNT(1) FROM c WHERE c.pk = 'a'", true,
                   "SELECT VALUE [{\"item\": COUNT(1)}] FROM c WHERE c.pk = 'a'");
    assert_rewrite("SELECT VALUE AVG(c.n) FROM c", false,
                   "SELECT VALUE [{\"item\": {\"sum\": SUM(c.n), \"count\": COUNT(c.n)}}] FROM c");
    assert_rewrite("SELECT VALUE MIN(c.n) FROM c", false,
                   "SELECT VALUE [{\"item\": MIN(c.n)}] FROM c");
    assert_rewrite("SELECT VALUE MIN(c.n) FROM c", true,
                   "SELECT VALUE [{\"item\": {\"min\": MIN(c.n), \"count\": COUNT(c.n)}}] FROM c");
    assert_rewrite("SELECT COUNT(1) AS n, MAX(c.s) AS m FROM c", true,
                   "SELECT {\"n\": {\"item\": COUNT(1)}, \"m\": {\"item\": {\"max\": MAX(c.s), "
                   "\"count\": COUNT(c.s)}}} AS payload FROM c");
    assert_rewrite("SELECT c.pk, COUNT(1) AS n FROM c GROUP BY c.pk", true,
                   "SELECT [{\"item\": c.pk}] AS groupByItems, {\"pk\": c.pk, \"n\": {\"item\": "
                   "COUNT(1)}} AS payload FROM c GROUP BY c.pk");
    assert_rewrite(
        "SELECT VALUE SUM(c.n) FROM c GROUP BY c.pk", true,
        "SELECT [{\"item\": c.pk}] AS groupByItems, [{\"item\": SUM(c.n)}] AS payload FROM c "
        "GROUP BY c.pk");
    assert_rewrite("SELECT * FROM c OFFSET 5 LIMIT 10", true, "SELECT * FROM c OFFSET 0 LIMIT 15");
    assert_rewrite("SELECT TOP 2 c.id FROM c", true, "");
    assert_rewrite("SELECT DISTINCT c.pk FROM c", true, "");
}
END_TEST

START_TEST(test_plan_gateway_describes_group_by)
{
    json_t *p = gateway_plan_of("SELECT c.pk, COUNT(1) AS n FROM c GROUP BY c.pk", true);

    assert_info(p, "groupByExpressions", "[\"c.pk\"]");
    assert_info(p, "groupByAliases", "[\"pk\",\"n\"]");
    assert_info(p, "groupByAliasToAggregateType", "{\"pk\":null,\"n\":\"Count\"}");
    assert_info(p, "aggregates", "[]");
    json_decref(p);
    p = gateway_plan_of("SELECT VALUE MAX(c.n) FROM c GROUP BY c.pk", true);
    assert_info(p, "groupByExpressions", "[\"c.pk\"]");
    assert_info(p, "aggregates", "[\"Max\"]");
    assert_info(p, "hasSelectValue", "true");
    json_decref(p);
}
END_TEST

START_TEST(test_plan_gateway_refuses_what_cannot_be_merged)
{
    static const char *const texts[] = {
        "SELECT VALUE COUNT(1) + 1 FROM c",
        "SELECT COUNT(1) AS n, 1 AS one FROM c",
        "SELECT c.pk, COUNT(1) * 2 AS n FROM c GROUP BY c.pk",
    };

    for (size_t i = 0; i < SF_ARRAY_LEN(texts); i++) {
        struct emu_query *q = must_parse(texts[i], NULL);
        struct sf_err err;
        json_t *plan = NULL;

        sf_err_clear(&err);
        ck_assert_int_eq(emu_query_plan_gateway(q, true, &plan, &err), SF_EINVAL);
        ck_assert_int_eq(err.http_status, 400);
        ck_assert_msg(strstr(err.msg, "cannot run this query cross-partition") != NULL, "%s: %s",
                      texts[i], err.msg);
        ck_assert_ptr_null(plan);
        emu_query_free(q);
    }
}
END_TEST

START_TEST(test_needs_plan)
{
    static const struct {
        const char *text;
        bool needs;
        bool streaming;
    } cases[] = {
        {"SELECT * FROM c WHERE c.a = 1", false, true},
        {"SELECT c.a, c.b FROM c", false, true},
        {"SELECT TOP 1 * FROM c", true, true},
        {"SELECT * FROM c ORDER BY c.a", true, false},
        {"SELECT DISTINCT c.a FROM c", true, true},
        {"SELECT * FROM c OFFSET 1 LIMIT 1", true, true},
        {"SELECT VALUE COUNT(1) FROM c", true, false},
    };

    for (size_t i = 0; i < SF_ARRAY_LEN(cases); i++) {
        struct emu_query *q = must_parse(cases[i].text, NULL);
        ck_assert_msg(emu_query_needs_plan(q) == cases[i].needs, "%s", cases[i].text);
        ck_assert_msg(emu_query_is_streaming(q) == cases[i].streaming, "%s", cases[i].text);
        emu_query_free(q);
    }
}
END_TEST

/* ---- limits ----------------------------------------------------------------------------- */

static enum sf_rc parse_limited(const char *text, const struct emu_query_limits *lim,
                                struct sf_err *err)
{
    struct emu_query *q = NULL;
    enum sf_rc rc;

    sf_err_clear(err);
    rc = emu_query_parse(text, NULL, lim, &q, err);
    emu_query_free(q);
    return rc;
}

/* "SELECT VALUE " + n times open + "1" + n times close. */
static char *nested(const char *open, const char *inner, const char *close, size_t n)
{
    size_t len = 13 + n * (strlen(open) + strlen(close)) + strlen(inner) + 1;
    char *s = malloc(len), *p;

    ck_assert_ptr_nonnull(s);
    p = s + snprintf(s, len, "SELECT VALUE ");
    for (size_t i = 0; i < n; i++)
        p += snprintf(p, len - (size_t)(p - s), "%s", open);
    p += snprintf(p, len - (size_t)(p - s), "%s", inner);
    for (size_t i = 0; i < n; i++)
        p += snprintf(p, len - (size_t)(p - s), "%s", close);
    return s;
}

START_TEST(test_limit_text_and_depth)
{
    struct emu_query_limits lim = {0};
    struct sf_err err;
    char *s;

    lim.max_text_bytes = 16;
    ck_assert_int_eq(parse_limited("SELECT VALUE 1", &lim, &err), SF_OK);
    ck_assert_int_eq(parse_limited("SELECT VALUE 12345", &lim, &err), SF_ELIMIT);
    ck_assert_ptr_nonnull(strstr(err.msg, "longer than the limit of 16 bytes"));
    ck_assert_int_eq(err.http_status, 400);

    s = nested("(", "1", ")", 30);
    ck_assert_int_eq(parse_limited(s, NULL, &err), SF_OK);
    free(s);
    s = nested("(", "1", ")", 70);
    ck_assert_int_eq(parse_limited(s, NULL, &err), SF_ELIMIT);
    ck_assert_ptr_nonnull(strstr(err.msg, "deeper than the limit of 64 levels"));
    free(s);
    s = nested("-", "1", "", 100);
    ck_assert_int_eq(parse_limited(s, NULL, &err), SF_ELIMIT);
    free(s);
    s = nested("NOT ", "true", "", 100);
    ck_assert_int_eq(parse_limited(s, NULL, &err), SF_ELIMIT);
    free(s);
    s = nested("[", "1", "]", 100);
    ck_assert_int_eq(parse_limited(s, NULL, &err), SF_ELIMIT);
    free(s);
    s = nested("ABS(", "1", ")", 100);
    ck_assert_int_eq(parse_limited(s, NULL, &err), SF_ELIMIT);
    free(s);
    /* A left-deep chain grows the tree without nesting parentheses. */
    s = nested("", "1", " + 1", 100);
    ck_assert_int_eq(parse_limited(s, NULL, &err), SF_ELIMIT);
    free(s);
    /* AND/OR chains stay flat: 500 terms like the service's maxLogicalOrPerSqlQuery. */
    s = nested("", "true", " OR false", 500);
    ck_assert_int_eq(parse_limited(s, NULL, &err), SF_OK);
    free(s);
    /* The configured depth is capped so recursion stays bounded. */
    lim.max_text_bytes = 0;
    lim.max_depth = 1000000;
    s = nested("(", "1", ")", 300);
    ck_assert_int_eq(parse_limited(s, &lim, &err), SF_ELIMIT);
    free(s);
    lim.max_depth = 8;
    s = nested("(", "1", ")", 8);
    ck_assert_int_eq(parse_limited(s, &lim, &err), SF_ELIMIT);
    ck_assert_ptr_nonnull(strstr(err.msg, "limit of 8 levels"));
    free(s);
}
END_TEST

START_TEST(test_limit_params)
{
    struct emu_query_limits lim = {0};
    struct emu_query *q = NULL;
    struct sf_err err;
    json_t *params = parse_json("[{\"name\":\"@a\",\"value\":1},{\"name\":\"@b\",\"value\":2},"
                                "{\"name\":\"@c\",\"value\":3}]");

    lim.max_params = 2;
    ck_assert_int_eq(emu_query_parse("SELECT VALUE @a", params, &lim, &q, &err), SF_ELIMIT);
    ck_assert_ptr_nonnull(strstr(err.msg, "3 parameters, more than the limit of 2"));
    lim.max_params = 3;
    ck_assert_int_eq(emu_query_parse("SELECT VALUE @a + @b + @c", params, &lim, &q, &err), SF_OK);
    emu_query_free(q);
    json_decref(params);
}
END_TEST

static enum sf_rc run_limited(const char *text, const struct emu_query_limits *lim,
                              const char *docs_text, size_t skip, size_t max, struct sf_err *err)
{
    struct emu_query *q = NULL;
    struct emu_query_exec *e = NULL;
    json_t *docs = parse_json(docs_text), *doc, *rows = NULL;
    enum sf_rc rc;
    size_t i;

    sf_err_clear(err);
    if ((rc = emu_query_parse(text, NULL, lim, &q, err)) != SF_OK)
        goto out;
    if ((rc = emu_query_exec_new(q, skip, max, &e, err)) != SF_OK)
        goto out;
    json_array_foreach(docs, i, doc)
    {
        if ((rc = emu_query_exec_add(e, doc, err)) != SF_OK)
            goto out;
    }
    rc = emu_query_exec_finish(e, &rows, NULL, err);
out:
    json_decref(rows);
    emu_query_exec_free(e);
    emu_query_free(q);
    json_decref(docs);
    return rc;
}

START_TEST(test_limit_rows_and_bytes)
{
    struct emu_query_limits lim = {0};
    struct sf_err err;

    lim.max_rows = 3;
    ck_assert_int_eq(run_limited("SELECT * FROM c ORDER BY c.id", &lim, D1, 0, 0, &err), SF_ELIMIT);
    ck_assert_ptr_nonnull(strstr(err.msg, "more than 3 rows"));
    ck_assert_int_eq(err.http_status, 400);
    ck_assert_int_eq(run_limited("SELECT * FROM c", &lim, D1, 0, 0, &err), SF_ELIMIT);
    ck_assert_int_eq(run_limited("SELECT DISTINCT VALUE c.id FROM c", &lim, D1, 3, 2, &err),
                     SF_ELIMIT);
    /* A window keeps streaming queries under the limit however many documents match. */
    ck_assert_int_eq(run_limited("SELECT * FROM c", &lim, D1, 1, 3, &err), SF_OK);
    ck_assert_int_eq(run_limited("SELECT TOP 3 * FROM c ORDER BY c.id", &lim, D1 "", 0, 0, &err),
                     SF_ELIMIT);
    ck_assert_int_eq(run_limited("SELECT VALUE COUNT(1) FROM c", &lim, D1, 0, 0, &err), SF_OK);

    memset(&lim, 0, sizeof(lim));
    lim.max_bytes = 1000;
    ck_assert_int_eq(run_limited("SELECT * FROM c ORDER BY c.id", &lim, D1, 0, 0, &err), SF_ELIMIT);
    ck_assert_ptr_nonnull(strstr(err.msg, "more than 1000 bytes"));
    ck_assert_int_eq(run_limited("SELECT VALUE c.id FROM c ORDER BY c.id", &lim, D1, 0, 0, &err),
                     SF_OK);
}
END_TEST

START_TEST(test_limit_value_bytes)
{
    static const char *const blowups[] = {
        "SELECT VALUE REPLACE(REPLACE(REPLACE('aaaaaaaaaa', 'a', 'aaaaa'), 'a', 'aaaaa'), 'a', "
        "'aaaaa')",
        "SELECT VALUE CONCAT(TOSTRING(c), TOSTRING(c), TOSTRING(c)) FROM c",
        "SELECT VALUE c.s || c.s || c.s || c.s || c.s || c.s FROM c",
        "SELECT VALUE ARRAY_CONCAT(c.a, c.a, c.a, c.a, c.a, c.a, c.a, c.a) FROM c",
        "SELECT VALUE TOSTRING([c, c, c]) FROM c",
    };
    const char *docs = "[{\"s\":\"0123456789012345678901234567890123456789012345678901234567"
                       "890123456789\",\"a\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18]}]";
    struct emu_query_limits lim = {0};
    struct sf_err err;

    lim.max_value_bytes = 300;
    for (size_t i = 0; i < SF_ARRAY_LEN(blowups); i++) {
        ck_assert_msg(run_limited(blowups[i], &lim, docs, 0, 0, &err) == SF_ELIMIT, "%s",
                      blowups[i]);
        ck_assert_msg(strstr(err.msg, "larger than the limit of 300 bytes") != NULL, "%s: %s",
                      blowups[i], err.msg);
        ck_assert_int_eq(err.http_status, 400);
        /* The same queries fit the default limit. */
        ck_assert_msg(run_limited(blowups[i], NULL, docs, 0, 0, &err) == SF_OK, "%s: %s",
                      blowups[i], err.msg);
    }
}
END_TEST

/* LIKE over a long string with a long pattern is capped, short patterns are not. */
START_TEST(test_limit_like_steps)
{
    struct sf_err err;
    size_t n = 60000;
    char *docs = malloc(n + 16), *query = malloc(1100);
    char *p;

    ck_assert_ptr_nonnull(docs);
    ck_assert_ptr_nonnull(query);
    p = docs + snprintf(docs, n + 16, "[{\"s\":\"");
    memset(p, 'a', n);
    snprintf(p + n, 8, "\"}]");
    p = query + snprintf(query, 1100, "SELECT VALUE c.s LIKE '%%");
    memset(p, 'a', 1000);
    snprintf(p + 1000, 32, "b' FROM c");
    ck_assert_int_eq(run_limited(query, NULL, docs, 0, 0, &err), SF_ELIMIT);
    ck_assert_ptr_nonnull(strstr(err.msg, "LIKE needs more than"));
    ck_assert_int_eq(run_limited("SELECT VALUE c.s LIKE '%a_b' FROM c", NULL, docs, 0, 0, &err),
                     SF_OK);
    free(docs);
    free(query);
}
END_TEST

START_TEST(test_limits_default)
{
    struct emu_query_limits lim;

    emu_query_limits_default(&lim);
    ck_assert_uint_eq(lim.max_text_bytes, 256 * 1024);
    ck_assert_uint_eq(lim.max_depth, 64);
    ck_assert_uint_gt(lim.max_params, 0);
    ck_assert_uint_gt(lim.max_rows, 0);
    ck_assert_uint_gt(lim.max_bytes, 0);
    ck_assert_uint_gt(lim.max_value_bytes, 0);
}
END_TEST

/* A big IN list and many documents: the engine stays linear enough to be usable. */
START_TEST(test_large_inputs)
{
    struct sf_err err;
    struct emu_query *q = NULL;
    json_t *docs = json_array(), *rows = NULL;
    char *text = malloc(200000), *p;

    ck_assert_ptr_nonnull(text);
    p = text + snprintf(text, 200000, "SELECT VALUE c.i FROM c WHERE c.i IN (");
    for (int i = 0; i < 2000; i++)
        p += snprintf(p, 200000 - (size_t)(p - text), "%s%d", i ? "," : "", i * 2);
    snprintf(p, 200000 - (size_t)(p - text), ") ORDER BY c.i DESC");
    for (int i = 0; i < 2000; i++)
        json_array_append_new(docs, json_pack("{s:i}", "i", i));
    ck_assert_msg(emu_query_parse(text, NULL, NULL, &q, &err) == SF_OK, "%s", err.msg);
    ck_assert_int_eq(emu_query_run(q, docs, &rows, &err), SF_OK);
    ck_assert_uint_eq(json_array_size(rows), 1000);
    ck_assert_int_eq(json_integer_value(json_array_get(rows, 0)), 1998);
    json_decref(rows);
    emu_query_free(q);
    json_decref(docs);
    free(text);
}
END_TEST

/* ---- budgets: time, hang-ups, window bytes ------------------------------------------------ */

static bool client_gone(void *arg)
{
    return *(bool *)arg;
}

/*
 * Runs text over docs_text with budget b set after the first `before`
 * documents (so those always go in); returns rc, and the rows and more flag on success.
 */
static enum sf_rc run_budgeted(const char *text, const char *docs_text, size_t before,
                               const struct emu_query_budget *b, json_t **ret_rows, bool *ret_more,
                               struct sf_err *err)
{
    struct emu_query *q = NULL;
    struct emu_query_exec *e = NULL;
    json_t *docs = parse_json(docs_text), *doc;
    enum sf_rc rc;
    size_t i;

    sf_err_clear(err);
    *ret_rows = NULL;
    if ((rc = emu_query_parse(text, NULL, NULL, &q, err)) != SF_OK)
        goto out;
    if ((rc = emu_query_exec_new(q, 0, 0, &e, err)) != SF_OK)
        goto out;
    if (before == 0)
        emu_query_exec_set_budget(e, b);
    json_array_foreach(docs, i, doc)
    {
        if ((rc = emu_query_exec_add(e, doc, err)) != SF_OK)
            goto out;
        if (i + 1 == before)
            emu_query_exec_set_budget(e, b);
    }
    rc = emu_query_exec_finish(e, ret_rows, ret_more, err);
out:
    emu_query_exec_free(e);
    emu_query_free(q);
    json_decref(docs);
    return rc;
}

START_TEST(test_budget_past_deadline_without_rows_is_408)
{
    struct emu_query_budget b = {.deadline_us = 1, .timeout_ms = 250};
    struct sf_err err;
    json_t *rows = NULL;
    bool more = false;

    /* Not even the first document fits: every LIKE looks at the clock. */
    ck_assert_int_eq(
        run_budgeted("SELECT * FROM c WHERE c.s LIKE '%x'", D1, 0, &b, &rows, &more, &err),
        SF_ETIMEOUT);
    ck_assert_int_eq(err.http_status, 408);
    ck_assert_ptr_nonnull(strstr(err.msg, "250 ms"));
    ck_assert_ptr_nonnull(strstr(err.msg, "--query-timeout-ms"));
    /* ORDER BY cannot hand out a partial page: 408 even with rows in hand. */
    ck_assert_int_eq(run_budgeted("SELECT * FROM c ORDER BY c.id", D1, 2, &b, &rows, &more, &err),
                     SF_ETIMEOUT);
    ck_assert_int_eq(run_budgeted("SELECT VALUE COUNT(1) FROM c", D1, 2, &b, &rows, &more, &err),
                     SF_ETIMEOUT);
}
END_TEST

START_TEST(test_budget_past_deadline_with_rows_ends_the_page_with_more)
{
    struct emu_query_budget b = {.deadline_us = 1, .timeout_ms = 250};
    struct sf_err err;
    json_t *rows = NULL, *want = parse_json("[\"1\",\"2\"]");
    bool more = false;

    ck_assert_int_eq(run_budgeted("SELECT VALUE c.id FROM c", D1, 2, &b, &rows, &more, &err),
                     SF_OK);
    ck_assert_msg(json_equal(rows, want), "the rows before the deadline");
    ck_assert(more);
    json_decref(rows);
    json_decref(want);
}
END_TEST

static bool gone_on_second_look(void *arg)
{
    return ++*(int *)arg >= 2;
}

START_TEST(test_budget_checked_inside_one_expensive_document)
{
    /*
     * The first look (at the document boundary) passes; only a look inside
     * the evaluation can see the second answer. Every LIKE looks.
     */
    int looks = 0;
    struct emu_query_budget b = {.gone = gone_on_second_look, .arg = &looks};
    struct sf_err err;
    struct emu_query *q = NULL;
    struct emu_query_exec *e = NULL;
    json_t *doc = parse_json("{\"s\":\"abc\"}");

    ck_assert_int_eq(emu_query_parse("SELECT * FROM c WHERE c.s LIKE '%x' OR c.s LIKE '%y'", NULL,
                                     NULL, &q, &err),
                     SF_OK);
    ck_assert_int_eq(emu_query_exec_new(q, 0, 0, &e, &err), SF_OK);
    emu_query_exec_set_budget(e, &b);
    ck_assert_int_eq(emu_query_exec_add(e, doc, &err), SF_ECONN);
    ck_assert_int_eq(looks, 2);
    emu_query_exec_free(e);
    emu_query_free(q);
    json_decref(doc);
}
END_TEST

START_TEST(test_budget_first_document_of_a_page_always_runs)
{
    /* Past the deadline before the page began: the first document still goes in. */
    struct emu_query_budget b = {.deadline_us = 1, .timeout_ms = 1};
    struct sf_err err;
    json_t *rows = NULL;
    bool more = false;

    ck_assert_int_eq(run_budgeted("SELECT VALUE c.id FROM c", D1, 0, &b, &rows, &more, &err),
                     SF_OK);
    ck_assert_uint_eq(json_array_size(rows), 1);
    ck_assert(more);
    json_decref(rows);
}
END_TEST

/*
 * Pages text over docs_text the way the router does, every page past its
 * deadline (so each page gets exactly its first document) and windows of
 * `window` rows, resuming by cursor; returns all rows (new) and the pages.
 */
static json_t *page_by_cursor(const char *text, const char *docs_text, size_t window,
                              size_t *ret_pages)
{
    struct emu_query_budget b = {.deadline_us = 1, .timeout_ms = 1};
    struct emu_query_cursor cur = {0, 0};
    struct emu_query *q = NULL;
    json_t *docs = parse_json(docs_text), *all = json_array();
    struct sf_err err;
    size_t pages = 0;
    bool more = true, resumed = false;

    ck_assert_int_eq(emu_query_parse(text, NULL, NULL, &q, &err), SF_OK);
    ck_assert(emu_query_is_resumable(q));
    while (more) {
        struct emu_query_exec *e = NULL;
        json_t *rows = NULL;

        ck_assert_uint_lt(pages++, 100);
        ck_assert_int_eq(emu_query_exec_new(q, 0, window, &e, &err), SF_OK);
        emu_query_exec_set_budget(e, &b);
        if (resumed)
            emu_query_exec_resume(e, &cur);
        for (size_t i = resumed ? (size_t)cur.docs : 0;
             i < json_array_size(docs) && !emu_query_exec_done(e); i++)
            ck_assert_int_eq(emu_query_exec_add(e, json_array_get(docs, i), &err), SF_OK);
        ck_assert_int_eq(emu_query_exec_finish(e, &rows, &more, &err), SF_OK);
        json_array_extend(all, rows);
        if (more)
            ck_assert_int_eq(emu_query_exec_cursor(e, json_array_size(rows), &cur, &err), SF_OK);
        resumed = true;
        json_decref(rows);
        emu_query_exec_free(e);
    }
    emu_query_free(q);
    json_decref(docs);
    *ret_pages = pages;
    return all;
}

START_TEST(test_budget_resumable_pages_progress_without_rows_and_match_the_full_result)
{
    static const char *const queries[] = {
        "SELECT VALUE c.id FROM c WHERE c.pk = 'b'", /* pages of no rows in between */
        "SELECT VALUE c.id FROM c WHERE c.id = '5'", /* the only row comes last */
        "SELECT c.id FROM c OFFSET 1 LIMIT 3",
        "SELECT TOP 2 VALUE c.id FROM c WHERE c.id != '1'",
        "SELECT * FROM c",
    };

    for (size_t i = 0; i < SF_ARRAY_LEN(queries); i++) {
        struct sf_err err;
        json_t *want = run_query(queries[i], NULL, D1, &err), *got;
        size_t pages = 0;

        ck_assert_ptr_nonnull(want);
        for (size_t window = 1; window <= 3; window++) {
            got = page_by_cursor(queries[i], D1, window, &pages);
            ck_assert_msg(json_equal(got, want), "%s, window %zu: pages differ from the full run",
                          queries[i], window);
            ck_assert_uint_ge(pages, 2);
            json_decref(got);
        }
        json_decref(want);
    }
}
END_TEST

START_TEST(test_budget_client_gone_stops_the_query)
{
    bool gone = true;
    struct emu_query_budget b = {.gone = client_gone, .arg = &gone};
    struct sf_err err;
    json_t *rows = NULL;
    bool more = false;

    ck_assert_int_eq(run_budgeted("SELECT * FROM c", D1, 1, &b, &rows, &more, &err), SF_ECONN);
    gone = false;
    ck_assert_int_eq(run_budgeted("SELECT * FROM c", D1, 1, &b, &rows, &more, &err), SF_OK);
    ck_assert_uint_eq(json_array_size(rows), 5);
    ck_assert(!more);
    json_decref(rows);
}
END_TEST

START_TEST(test_budget_window_bytes_cut_streaming_pages)
{
    struct emu_query_budget b = {.max_window_bytes = 1};
    struct sf_err err;
    json_t *rows = NULL;
    bool more = false;

    /* At least one row per page, and the page says more follow. */
    ck_assert_int_eq(run_budgeted("SELECT * FROM c", D1, 0, &b, &rows, &more, &err), SF_OK);
    ck_assert_uint_eq(json_array_size(rows), 1);
    ck_assert(more);
    json_decref(rows);
    b.max_window_bytes = 1u << 20;
    ck_assert_int_eq(run_budgeted("SELECT * FROM c", D1, 0, &b, &rows, &more, &err), SF_OK);
    ck_assert_uint_eq(json_array_size(rows), 5);
    ck_assert(!more);
    json_decref(rows);
}
END_TEST

/* ---- recursion bounds against the server's thread stack ----------------------------------- */

/* open x n, then mid, then close x n, as a new string. */
static char *nest(const char *open, const char *mid, const char *close, size_t n)
{
    size_t lo = strlen(open), lm = strlen(mid), lc = strlen(close);
    char *t = malloc(n * (lo + lc) + lm + 1), *p = t;

    ck_assert_ptr_nonnull(t);
    for (size_t i = 0; i < n; i++, p += lo)
        memcpy(p, open, lo);
    memcpy(p, mid, lm);
    p += lm;
    for (size_t i = 0; i < n; i++, p += lc)
        memcpy(p, close, lc);
    *p = '\0';
    return t;
}

struct stack_case {
    const char *prefix, *open, *mid, *close, *suffix;
};

/*
 * Parses and runs the deepest nesting of each form the parser accepts at
 * its cap, and runs every value walker over a document at
 * SF_JSON_MAX_DEPTH. Meant to run on a thread with the server's stack: an
 * overflow is an ASan report (or a crash), i.e. a failed test.
 */
static void *deep_work(void *arg)
{
    static const struct stack_case forms[] = {
        {"SELECT VALUE ", "(", "1", ")", ""},
        {"SELECT VALUE ", "ABS(", "1", ")", ""},
        {"SELECT VALUE ", "[", "1", "]", ""},
        {"SELECT VALUE ", "{\"a\":", "1", "}", ""},
        {"SELECT VALUE ", "-(", "1", ")", ""},
        {"SELECT * FROM c WHERE ", "NOT (", "c.x = 1", ")", ""},
        {"SELECT * FROM c WHERE ", "(c.x = 1 AND ", "true", ")", ""},
        {"SELECT VALUE ", "(1 ?? ", "2", ")", " FROM c"},
        {"SELECT VALUE ", "(true ? ", "1", " : 2)", " FROM c"},
    };
    struct emu_query_limits lim = {.max_depth = EMU_QUERY_MAX_DEPTH};
    struct sf_err err;
    json_t *docs = json_array(), *rows = NULL, *doc;
    char *inner, *text;
    size_t deepest;

    SF_UNUSED(arg);
    json_array_append_new(docs, json_pack("{s:i}", "x", 1));
    for (size_t f = 0; f < SF_ARRAY_LEN(forms); f++) {
        struct emu_query *q = NULL;

        for (deepest = EMU_QUERY_MAX_DEPTH; deepest > 0; deepest--) {
            inner = nest(forms[f].open, forms[f].mid, forms[f].close, deepest);
            text = malloc(strlen(inner) + 64);
            ck_assert_ptr_nonnull(text);
            snprintf(text, strlen(inner) + 64, "%s%s%s", forms[f].prefix, inner, forms[f].suffix);
            free(inner);
            sf_err_clear(&err);
            if (emu_query_parse(text, NULL, &lim, &q, &err) == SF_OK) {
                free(text);
                break;
            }
            ck_assert_msg(err.rc == SF_ELIMIT, "form %zu at %zu: %s", f, deepest, err.msg);
            free(text);
        }
        ck_assert_msg(deepest >= EMU_QUERY_MAX_DEPTH / 4, "form %zu: only %zu levels parse", f,
                      deepest);
        ck_assert_int_eq(emu_query_run(q, docs, &rows, &err), SF_OK);
        json_decref(rows);
        emu_query_free(q);
    }
    json_decref(docs);

    /* Every value walker at the JSON bound: parse, compare, hash, equal, write, free. */
    inner = nest("[", "1", "]", SF_JSON_MAX_DEPTH - 1);
    text = malloc(strlen(inner) + 32);
    ck_assert_ptr_nonnull(text);
    snprintf(text, strlen(inner) + 32, "{\"v\":%s}", inner);
    docs = json_array();
    for (int i = 0; i < 2; i++) {
        doc = sf_json_parse(text, strlen(text), &err);
        ck_assert_msg(doc != NULL, "%s", err.msg);
        json_array_append_new(docs, doc);
    }
    {
        static const char *const walkers[] = {
            "SELECT VALUE c.v FROM c ORDER BY c.v",
            "SELECT DISTINCT VALUE c.v FROM c",
            "SELECT VALUE c.v = c.v FROM c",
            "SELECT VALUE ARRAY_CONTAINS([c.v], c.v) FROM c",
            "SELECT * FROM c WHERE c.v IN ([1], c.v)",
            "SELECT VALUE LENGTH(ToString(c.v)) FROM c",
        };
        for (size_t w = 0; w < SF_ARRAY_LEN(walkers); w++) {
            struct emu_query *q = NULL;
            ck_assert_int_eq(emu_query_parse(walkers[w], NULL, NULL, &q, &err), SF_OK);
            ck_assert_msg(emu_query_run(q, docs, &rows, &err) == SF_OK, "%s: %s", walkers[w],
                          err.msg);
            ck_assert_msg(json_array_size(rows) >= 1, "%s: no rows", walkers[w]);
            json_decref(rows);
            emu_query_free(q);
        }
    }
    json_decref(docs);
    free(inner);
    free(text);
    return NULL;
}

START_TEST(test_parser_cap_and_json_bound_fit_the_server_thread_stack)
{
    pthread_attr_t attr;
    pthread_t th;

    ck_assert_int_eq(pthread_attr_init(&attr), 0);
    ck_assert_int_eq(pthread_attr_setstacksize(&attr, EMU_HTTP_THREAD_STACK_BYTES), 0);
    ck_assert_int_eq(pthread_create(&th, &attr, deep_work, NULL), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    pthread_attr_destroy(&attr);
}
END_TEST

static Suite *query_suite(void)
{
    Suite *s = suite_create("query");
    TCase *tc = tcase_create("results");

    tcase_add_loop_test(tc, test_result_case, 0, (int)SF_ARRAY_LEN(result_cases));
    suite_add_tcase(s, tc);
    tc = tcase_create("errors");
    tcase_add_loop_test(tc, test_error_case, 0, (int)SF_ARRAY_LEN(error_cases));
    suite_add_tcase(s, tc);
    tc = tcase_create("exec");
    tcase_add_test(tc, test_window_streaming);
    tcase_add_test(tc, test_window_top_stops_early);
    tcase_add_test(tc, test_window_order_by);
    tcase_add_test(tc, test_paging_matches_full_result);
    tcase_add_test(tc, test_exec_state);
    tcase_add_test(tc, test_exec_rows_outlive_docs);
    suite_add_tcase(s, tc);
    tc = tcase_create("conditions");
    tcase_add_test(tc, test_condition_match);
    tcase_add_test(tc, test_condition_errors);
    tcase_add_test(tc, test_match_full_query);
    suite_add_tcase(s, tc);
    sf_check_case(s, "plans", NULL, NULL, 0,
                  (const TTest *[]){test_plan_passthrough, test_plan_describe, test_needs_plan,
                                    test_plan_gateway_rewrites_per_range_queries,
                                    test_plan_gateway_describes_group_by,
                                    test_plan_gateway_refuses_what_cannot_be_merged, NULL});
    sf_check_case(s, "limits", NULL, NULL, 0,
                  (const TTest *[]){test_limit_text_and_depth, test_limit_params,
                                    test_limit_rows_and_bytes, test_limit_value_bytes,
                                    test_limit_like_steps, test_limits_default, test_large_inputs,
                                    NULL});
    sf_check_case(s, "budget", NULL, NULL, 0,
                  (const TTest *[]){
                      test_budget_past_deadline_without_rows_is_408,
                      test_budget_past_deadline_with_rows_ends_the_page_with_more,
                      test_budget_checked_inside_one_expensive_document,
                      test_budget_first_document_of_a_page_always_runs,
                      test_budget_resumable_pages_progress_without_rows_and_match_the_full_result,
                      test_budget_client_gone_stops_the_query,
                      test_budget_window_bytes_cut_streaming_pages, NULL});
    sf_check_case(
        s, "stack", NULL, NULL, 0,
        (const TTest *[]){test_parser_cap_and_json_bound_fit_the_server_thread_stack, NULL});
    return s;
}

int main(void)
{
    return sf_check_run(query_suite());
}
