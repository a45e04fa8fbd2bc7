/*
 * cosmos_http.h - the client's own HTTP/1.1 keep-alive transport for plain
 * http:// endpoints (cosmolite, the emulator behind a local proxy).
 *
 * Why not libcurl here too: per request libcurl spends ~100k instructions
 * in its state machine, URL parsing and header formatting, four times what
 * the whole request costs otherwise; on a loaded host that is throughput
 * taken from the server. https:// endpoints keep using libcurl (TLS,
 * certificate verification). Either transport can be forced (options).
 *
 * Two layers: an incremental response parser that is a pure function over
 * byte chunks (fuzzed, unit-tested with every split), and a connection that
 * does the socket I/O with deadlines. Neither is thread-safe; the client
 * gives each thread its own connection from the pool.
 */
#ifndef COSMOS_HTTP_H
#define COSMOS_HTTP_H

#include <sys/socket.h>

#include "common/sf_base.h"
#include "common/sf_buf.h"
#include "common/sf_err.h"
#include "cosmos/cosmos_proto.h"

#define COSMOS_HTTP_LINE_MAX (COSMOS_HEADER_MAX + 1024) /* one header line */
#define COSMOS_HTTP_HEAD_MAX (256u << 10)               /* all header lines */

enum cosmos_http_state {
    COSMOS_HTTP_HEAD = 0,    /* status line and headers */
    COSMOS_HTTP_BODY,        /* Content-Length bytes */
    COSMOS_HTTP_UNTIL_CLOSE, /* no length: the body ends when the peer closes */
    COSMOS_HTTP_CHUNK_SIZE,  /* "hex[;ext]\r\n" */
    COSMOS_HTTP_CHUNK_DATA,
    COSMOS_HTTP_CHUNK_END, /* the CRLF after a chunk's data */
    COSMOS_HTTP_TRAILERS,  /* after the last chunk, until an empty line */
    COSMOS_HTTP_DONE,
};

/* Incremental parser of one response. */
struct cosmos_http_parser {
    enum cosmos_http_state state;
    struct sf_buf line; /* the current partial line */
    uint64_t remaining; /* bytes left in the body or chunk */
    uint64_t length;    /* Content-Length, when has_length */
    size_t head_bytes;  /* bytes of header lines so far (capped) */
    bool no_body;       /* a HEAD request: no body whatever the headers say */
    bool has_length;
    bool chunked;
    bool close; /* the connection cannot be reused after this response */
    bool saw_status;
};

/* Prepares p for one response; no_body for HEAD requests. Allocates nothing. */
void cosmos_http_parser_init(struct cosmos_http_parser *p, bool no_body);
void cosmos_http_parser_release(struct cosmos_http_parser *p);

/*
 * Consumes bytes of the response: header lines go through
 * cosmos_response_header into resp, body bytes (de-chunked) into resp->body.
 * *ret_used tells how many bytes were consumed (less than len only once the
 * response is complete). SF_EPROTO for malformed framing, SF_ELIMIT past a
 * cap (line, head, resp->body.max).
 */
enum sf_rc cosmos_http_parse(struct cosmos_http_parser *p, struct cosmos_response *resp,
                             const char *buf, size_t len, size_t *ret_used, struct sf_err *err);

/* The peer closed the connection: completes an until-close body. SF_EPROTO when truncated. */
enum sf_rc cosmos_http_parse_eof(struct cosmos_http_parser *p, struct sf_err *err);

/* true once the whole response was parsed. */
bool cosmos_http_done(const struct cosmos_http_parser *p);

/* ---------------------------------------------------------------------------
 * Connections
 */

/* Where to connect, resolved once when the client is created. */
struct cosmos_http_target {
    struct sockaddr_storage addr;
    socklen_t addr_len;
    char host_header[300]; /* "host:port" */
    char path_prefix[256]; /* endpoint path without the trailing slash, "" usually */
};

/*
 * Parses "http://host[:port][/prefix]" (host a name, IPv4 or [IPv6]; port
 * 80 by default) and resolves it. SF_EINVAL / SF_ECONN with a message.
 */
enum sf_rc cosmos_http_target_init(struct cosmos_http_target *t, const char *endpoint,
                                   struct sf_err *err);

/* One keep-alive connection with its buffers. */
struct cosmos_http_conn {
    int fd;             /* -1 while closed */
    struct sf_buf head; /* request line and headers being sent */
    char *in;           /* receive buffer */
    size_t in_size;
    unsigned requests; /* requests sent on the current socket */
};

void cosmos_http_conn_init(struct cosmos_http_conn *c);
void cosmos_http_conn_release(struct cosmos_http_conn *c);

/*
 * One attempt of req over c: connects when needed (a pooled socket the
 * server closed is noticed before sending), sends, parses the response into
 * resp. A socket that dies before any response byte arrives is resent once on
 * a fresh connection only when resend_ok (read or guarded write); otherwise
 * COSMOS_NET_MAYBE_SENT. Deadlines: connect_ms for connecting, timeout_ms for
 * the whole attempt. msg gets the reason of a failure.
 */
enum cosmos_net cosmos_http_send(struct cosmos_http_conn *c, const struct cosmos_http_target *t,
                                 int64_t connect_ms, int64_t timeout_ms,
                                 const struct cosmos_req *req, const char *date, const char *auth,
                                 bool resend_ok, struct cosmos_response *resp, char *msg,
                                 size_t msg_size);

#endif
