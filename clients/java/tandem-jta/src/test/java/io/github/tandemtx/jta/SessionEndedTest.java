package io.github.tandemtx.jta;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.sql.SQLException;
import javax.transaction.xa.XAException;
import org.junit.jupiter.api.Test;

/**
 * An error that ends the session is not the database refusing the
 * statement: a one-phase COMMIT answered by PostgreSQL's FATAL 57P01 (a
 * backend told to terminate once its commit is done) or MariaDB's
 * "connection was killed" may have committed. Before, both read as a
 * refusal (XA_RBROLLBACK) and the one-phase commit was reported rolled back.
 */
class SessionEndedTest {
    @Test
    void errorsThatEndTheSessionLeaveTheOutcomeUnknown() {
        assertEquals(XAException.XAER_RMFAIL, SqlBranch.errorCode(new SQLException("FATAL: terminating connection due to administrator command", "57P01")));
        assertEquals(XAException.XAER_RMFAIL, SqlBranch.errorCode(new SQLException("Connection was killed", "70100", 1927)));
        assertEquals(XAException.XAER_RMFAIL, SqlBranch.errorCode(new SQLException("Query execution was interrupted", "70100", 1317)));
        assertEquals(XAException.XA_RBROLLBACK, SqlBranch.errorCode(new SQLException("violates foreign key constraint", "23503")));
        assertEquals(XAException.XA_RBROLLBACK, SqlBranch.errorCode(new SQLException("Deadlock found", "40001", 1213)));
    }
}
