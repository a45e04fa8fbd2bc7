/*
 * emu_qplan.c - the gateway's query plan (cosmolite --gateway-query-plans):
 * what Azure's gateway answers to x-ms-cosmos-is-query-plan-request and puts
 * in a 400/1004 error's additionalErrorInfo, with the rewritten per-range
 * query the SDKs then send to every partition key range.
 *
 * The rewrites follow the shapes the SDKs' pipelines consume (docs/azure-qplan.md):
 *   ORDER BY   SELECT c._rid, [{"item": o1}, ...] AS orderByItems, <projection> AS payload
 *              FROM c WHERE ({documentdb-formattableorderbyquery-filter}) [AND (w)] ORDER BY ...
 *              (the SDK replaces the placeholder with "true" or its resume filter)
 *   VALUE agg  SELECT VALUE [{"item": A}] FROM c [WHERE w]
 *   aggregates SELECT {"alias": {"item": A}, ...} AS payload FROM c [WHERE w]
 *   GROUP BY   SELECT [{"item": g1}, ...] AS groupByItems, <payload> AS payload FROM c ...
 *              GROUP BY g1, ...
 *   OFFSET     ... OFFSET 0 LIMIT offset+limit (the SDK skips and cuts)
 * where A is COUNT(x) and SUM(x) as written, AVG(x) as {"sum": SUM(x), "count": COUNT(x)},
 * and MIN/MAX(x) as {"min": MIN(x), "count": COUNT(x)} for clients that declare the
 * CompositeAggregate feature (the v4 SDKs), as written for those that do not (the v3
 * SDKs, which read the bare value). TOP and DISTINCT stay in the per-range query as
 * they are: each range's partial answer is a superset of its share of the global one.
 * The expressions are copied as written, so parameters keep their names.
 */
#include "common/sf_base.h"

#include "common/sf_buf.h"
#include "emulator/emu_query_int.h"

/*
 * The rewritten query is a few times the original at most (AVG and MIN/MAX
 * repeat their argument): bounded by the query's own text limit, times 4.
 */
#define QPLAN_GROWTH 4u

struct qplan {
    const struct emu_query *q;
    bool composite;
    struct sf_buf b;
};

static enum sf_rc not_servable(struct sf_err *err, const char *why)
{
    return qerr(err, SF_EINVAL,
                "cosmolite cannot run this query cross-partition (%s); give it a partition key "
                "or rewrite it",
                why);
}

static enum sf_rc span(struct qplan *p, size_t pos, size_t end)
{
    return sf_buf_append(&p->b, p->q->text + pos, end - pos);
}

/* An output name as a JSON string literal (the query dialect reads JSON escapes). */
static enum sf_rc name_literal(struct qplan *p, const json_t *name)
{
    char *s = json_dumps(name, JSON_ENCODE_ANY);
    enum sf_rc rc;

    if (s == NULL)
        return SF_ENOMEM;
    rc = sf_buf_puts(&p->b, s);
    free(s);
    return rc;
}

/* The partial aggregate A of an aggregate call n (see the file comment). */
static enum sf_rc partial_agg(struct qplan *p, const struct qnode *n)
{
    const char *t = p->q->text + n->pos;
    const char *open = memchr(t, '(', n->end - n->pos);
    size_t arg_pos, arg_end = n->end - 1; /* the closing parenthesis */
    enum qfn fn = (enum qfn)n->op;
    enum sf_rc rc = SF_OK;

    if (open == NULL || p->q->text[arg_end] != ')')
        return span(p, n->pos, n->end);
    arg_pos = (size_t)(open - p->q->text) + 1;
    if (fn == QF_AVG) {
        rc |= sf_buf_puts(&p->b, "{\"sum\": SUM(");
        rc |= span(p, arg_pos, arg_end);
        rc |= sf_buf_puts(&p->b, "), \"count\": COUNT(");
        rc |= span(p, arg_pos, arg_end);
        rc |= sf_buf_puts(&p->b, ")}");
    } else if ((fn == QF_MIN || fn == QF_MAX) && p->composite) {
        rc |= sf_buf_printf(&p->b, "{\"%s\": %s(", fn == QF_MIN ? "min" : "max",
                            fn == QF_MIN ? "MIN" : "MAX");
        rc |= span(p, arg_pos, arg_end);
        rc |= sf_buf_puts(&p->b, "), \"count\": COUNT(");
        rc |= span(p, arg_pos, arg_end);
        rc |= sf_buf_puts(&p->b, ")}");
    } else {
        rc = span(p, n->pos, n->end);
    }
    return rc == SF_OK ? SF_OK : SF_ENOMEM;
}

static bool has_agg(const struct qnode *n)
{
    if (n->kind == QN_AGG)
        return true;
    for (size_t i = 0; i < n->nkids; i++) {
        if (has_agg(n->kids[i]))
            return true;
    }
    return false;
}

/* {"item": A} for an aggregate item, the expression as written otherwise. */
static enum sf_rc item_expr(struct qplan *p, const struct qnode *e, size_t pos, size_t end,
                            struct sf_err *err)
{
    enum sf_rc rc;

    if (e->kind == QN_AGG) {
        if (sf_buf_puts(&p->b, "{\"item\": ") != SF_OK || partial_agg(p, e) != SF_OK ||
            sf_buf_putc(&p->b, '}') != SF_OK)
            return SF_ENOMEM;
        return SF_OK;
    }
    if (has_agg(e))
        return not_servable(err, "an aggregate inside a larger expression of the select list");
    rc = span(p, pos, end);
    return rc;
}

/* The projection as one object {"name": expr, ...} (aggregates as {"item": A}). */
static enum sf_rc object_payload(struct qplan *p, struct sf_err *err)
{
    const struct emu_query *q = p->q;
    enum sf_rc rc;

    if (sf_buf_putc(&p->b, '{') != SF_OK)
        return SF_ENOMEM;
    for (size_t i = 0; i < q->nitems; i++) {
        if ((i > 0 && sf_buf_puts(&p->b, ", ") != SF_OK) ||
            name_literal(p, q->items[i].name) != SF_OK || sf_buf_puts(&p->b, ": ") != SF_OK)
            return SF_ENOMEM;
        if ((rc = item_expr(p, q->items[i].expr, q->items[i].pos, q->items[i].end, err)) != SF_OK)
            return rc;
    }
    return sf_buf_putc(&p->b, '}');
}

/* The payload of a GROUP BY or aggregate query: VALUE gives [{"item": A}] or the value. */
static enum sf_rc agg_payload(struct qplan *p, bool value_in_array, struct sf_err *err)
{
    const struct emu_query *q = p->q;
    enum sf_rc rc;

    if (!q->select_value)
        return object_payload(p, err);
    if (q->value_expr->kind == QN_AGG && value_in_array) {
        if (sf_buf_putc(&p->b, '[') != SF_OK)
            return SF_ENOMEM;
        if ((rc = item_expr(p, q->value_expr, q->value_pos, q->proj_end, err)) != SF_OK)
            return rc;
        return sf_buf_putc(&p->b, ']');
    }
    return item_expr(p, q->value_expr, q->value_pos, q->proj_end, err);
}

static enum sf_rc order_items(struct qplan *p, const struct qorder_item *items, size_t n,
                              bool with_dir)
{
    enum sf_rc rc = SF_OK;

    for (size_t i = 0; i < n; i++) {
        rc |= sf_buf_puts(&p->b, i > 0 ? ", " : "");
        rc |= sf_buf_append(&p->b, json_string_value(items[i].text),
                            json_string_length(items[i].text));
        if (with_dir && items[i].desc)
            rc |= sf_buf_puts(&p->b, " DESC");
    }
    return rc == SF_OK ? SF_OK : SF_ENOMEM;
}

static enum sf_rc item_list(struct qplan *p, const struct qorder_item *items, size_t n)
{
    enum sf_rc rc = sf_buf_putc(&p->b, '[');

    for (size_t i = 0; i < n; i++) {
        rc |= sf_buf_puts(&p->b, i > 0 ? ", {\"item\": " : "{\"item\": ");
        rc |= sf_buf_append(&p->b, json_string_value(items[i].text),
                            json_string_length(items[i].text));
        rc |= sf_buf_putc(&p->b, '}');
    }
    rc |= sf_buf_putc(&p->b, ']');
    return rc == SF_OK ? SF_OK : SF_ENOMEM;
}

static enum sf_rc rewrite_select(struct qplan *p, struct sf_err *err)
{
    const struct emu_query *q = p->q;
    enum sf_rc rc = SF_OK;

    if (sf_buf_puts(&p->b, q->distinct ? "SELECT DISTINCT " : "SELECT ") != SF_OK ||
        (q->has_top && sf_buf_printf(&p->b, "TOP %lld ", (long long)q->top) != SF_OK))
        return SF_ENOMEM;
    if (q->norder > 0) {
        /* _rid breaks ties in the SDKs' merge; DISTINCT rows must not carry it. */
        if (!q->distinct && q->alias != NULL &&
            sf_buf_printf(&p->b, "%s._rid, ", json_string_value(q->alias)) != SF_OK)
            return SF_ENOMEM;
        if (item_list(p, q->order, q->norder) != SF_OK ||
            sf_buf_puts(&p->b, " AS orderByItems, ") != SF_OK)
            return SF_ENOMEM;
        if (q->select_star)
            rc = q->alias != NULL ? sf_buf_puts(&p->b, json_string_value(q->alias)) : SF_ENOMEM;
        else if (q->select_value)
            rc = span(p, q->value_pos, q->proj_end);
        else
            rc = object_payload(p, err);
        if (rc != SF_OK || (rc = sf_buf_puts(&p->b, " AS payload")) != SF_OK)
            return rc;
    } else if (q->ngroup > 0) {
        if (item_list(p, q->group, q->ngroup) != SF_OK ||
            sf_buf_puts(&p->b, " AS groupByItems, ") != SF_OK)
            return SF_ENOMEM;
        if ((rc = agg_payload(p, true, err)) != SF_OK ||
            (rc = sf_buf_puts(&p->b, " AS payload")) != SF_OK)
            return rc;
    } else if (q->naggs > 0) {
        if (q->select_value) {
            if (q->value_expr->kind != QN_AGG)
                return not_servable(err, "an aggregate inside a larger SELECT VALUE expression");
            if (sf_buf_puts(&p->b, "VALUE ") != SF_OK)
                return SF_ENOMEM;
            return agg_payload(p, true, err);
        }
        for (size_t i = 0; i < q->nitems; i++) {
            if (q->items[i].expr->kind != QN_AGG)
                return not_servable(err, "a select list that mixes aggregates with other "
                                         "expressions, without GROUP BY");
        }
        if ((rc = object_payload(p, err)) != SF_OK ||
            (rc = sf_buf_puts(&p->b, " AS payload")) != SF_OK)
            return rc;
    } else {
        rc = span(p, q->proj_pos, q->proj_end);
    }
    return rc;
}

static enum sf_rc rewrite(struct qplan *p, struct sf_err *err)
{
    const struct emu_query *q = p->q;
    enum sf_rc rc;

    if ((rc = rewrite_select(p, err)) != SF_OK)
        return rc;
    if (q->has_from &&
        (sf_buf_putc(&p->b, ' ') != SF_OK || span(p, q->from_pos, q->from_end) != SF_OK))
        return SF_ENOMEM;
    if (q->norder > 0) {
        if (sf_buf_puts(&p->b, " WHERE ({documentdb-formattableorderbyquery-filter})") != SF_OK)
            return SF_ENOMEM;
        if (q->where != NULL &&
            (sf_buf_puts(&p->b, " AND (") != SF_OK ||
             span(p, q->where_pos, q->where_end) != SF_OK || sf_buf_putc(&p->b, ')') != SF_OK))
            return SF_ENOMEM;
    } else if (q->where != NULL && (sf_buf_puts(&p->b, " WHERE ") != SF_OK ||
                                    span(p, q->where_pos, q->where_end) != SF_OK)) {
        return SF_ENOMEM;
    }
    if (q->ngroup > 0 &&
        (sf_buf_puts(&p->b, " GROUP BY ") != SF_OK || order_items(p, q->group, q->ngroup, false)))
        return SF_ENOMEM;
    if (q->norder > 0 &&
        (sf_buf_puts(&p->b, " ORDER BY ") != SF_OK || order_items(p, q->order, q->norder, true)))
        return SF_ENOMEM;
    if (q->has_offset) {
        /* Every range must hand over its first offset+limit rows: the SDK skips globally. */
        int64_t n = q->offset > INT64_MAX - q->limit ? INT64_MAX : q->offset + q->limit;
        if (sf_buf_printf(&p->b, " OFFSET 0 LIMIT %lld", (long long)n) != SF_OK)
            return SF_ENOMEM;
    }
    return SF_OK;
}

/* GROUP BY fields of queryInfo: expressions, aliases and alias -> aggregate type. */
static enum sf_rc describe_group(const struct emu_query *q, json_t *info)
{
    json_t *exprs = json_object_get(info, "groupByExpressions");
    json_t *aliases = json_object_get(info, "groupByAliases");
    json_t *types = json_object();
    int bad = types == NULL;

    for (size_t i = 0; i < q->ngroup; i++)
        bad |= json_array_append(exprs, q->group[i].text);
    for (size_t i = 0; i < q->nitems; i++) {
        const struct qnode *x = q->items[i].expr;
        bad |= json_array_append(aliases, q->items[i].name);
        bad |= json_object_set_new(
            types, json_string_value(q->items[i].name),
            x->kind == QN_AGG ? json_string(qfn_info_of((enum qfn)x->op)->plan_name) : json_null());
    }
    bad |= json_object_set_new(info, "groupByAliasToAggregateType", types);
    return bad ? SF_ENOMEM : SF_OK;
}

enum sf_rc emu_query_plan_gateway(const struct emu_query *q, bool composite_aggregates,
                                  json_t **ret_plan, struct sf_err *err)
{
    struct qplan p = {q, composite_aggregates, {0}};
    json_t *plan = NULL, *info, *text;
    enum sf_rc rc;

    sf_buf_init(&p.b, q->lim.max_text_bytes * QPLAN_GROWTH + 4096);
    if ((rc = emu_query_plan(q, EMU_QUERY_PLAN_DESCRIBE, &plan, err)) != SF_OK)
        goto out;
    info = json_object_get(plan, "queryInfo");
    if (q->norder > 0 || q->naggs > 0 || q->ngroup > 0 || q->has_offset) {
        if ((rc = rewrite(&p, err)) != SF_OK) {
            if (rc == SF_ENOMEM || rc == SF_ELIMIT)
                rc = qerr(err, SF_ENOMEM, "out of memory planning the query");
            goto out;
        }
        text = json_stringn(p.b.data, p.b.len);
        if (text == NULL || json_object_set_new(info, "rewrittenQuery", text) != 0) {
            rc = qerr(err, SF_ENOMEM, "out of memory planning the query");
            goto out;
        }
    }
    if ((q->ngroup > 0 && !q->select_value) && describe_group(q, info) != SF_OK) {
        rc = qerr(err, SF_ENOMEM, "out of memory planning the query");
        goto out;
    }
    if (q->ngroup > 0 && q->select_value) {
        json_t *exprs = json_object_get(info, "groupByExpressions");
        for (size_t i = 0; i < q->ngroup; i++) {
            if (json_array_append(exprs, q->group[i].text) != 0) {
                rc = qerr(err, SF_ENOMEM, "out of memory planning the query");
                goto out;
            }
        }
    }
    *ret_plan = plan;
    plan = NULL;
out:
    json_decref(plan);
    sf_buf_release(&p.b);
    return rc;
}
