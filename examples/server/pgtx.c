/* pgtx.c -- see pgtx.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pgtx.h"

void pg_message(PGconn *pg, const PGresult *r, char *err, size_t errlen)
{
    const char *m = r ? PQresultErrorMessage(r) : "";
    size_t len;

    if (!m || !*m)
        m = pg ? PQerrorMessage(pg) : "no connection";
    len = strlen(m);
    while (len > 0 && (m[len - 1] == '\n' || m[len - 1] == ' '))
        len--;
    snprintf(err, errlen, "PostgreSQL: %.*s", (int)len, m);
}

int pg_conn_lost(PGconn *pg, const PGresult *r)
{
    const char *s = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;

    return PQstatus(pg) != CONNECTION_OK || (s && (strncmp(s, "08", 2) == 0 ||
                                                   strcmp(s, "57P01") == 0 ||
                                                   strcmp(s, "57P03") == 0));
}

int pg_command_ok(const PGresult *r)
{
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;

    return st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
}

enum tx_result pg_statement_error(PGconn *pg, const PGresult *r)
{
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;

    return state && strcmp(state, "23505") == 0 ? TX_CONFLICT
           : pg_conn_lost(pg, r) ? TX_DOWN : TX_FAILED;
}

void pg_outcome_rows(const PGresult *r, tx_outcome *out)
{
    out->rows = strtoull(PQcmdTuples((PGresult *)r), NULL, 10);
    out->first = PQntuples(r) > 0 && PQnfields(r) > 0 ? PQgetvalue(r, 0, 0) : NULL;
}
