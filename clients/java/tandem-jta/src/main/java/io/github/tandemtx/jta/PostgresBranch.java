package io.github.tandemtx.jta;

import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.function.Consumer;
import javax.transaction.xa.XAException;
import org.postgresql.core.BaseConnection;
import org.postgresql.core.TransactionState;

/**
 * A PostgreSQL branch over a pgjdbc connection. The BEGIN goes out with the
 * first statement (pgjdbc with autocommit off); phase 1 is
 * {@code PREPARE TRANSACTION '<gid>'}, the GID named with its owner just
 * before ({@link TandemXid#postgresGid}). A branch that wrote
 * nothing ({@code txid_current_if_assigned() IS NULL}) commits locally.
 * After the prepare the connection is free: the coordinator commits the
 * prepared transaction from its own connections.
 */
final class PostgresBranch extends SqlBranch {
    PostgresBranch(ResourceManager info, Connection conn, Consumer<SqlBranch> onCompleted) {
        super(info, conn, onCompleted);
    }

    @Override
    public boolean sessionBound() {
        return false;
    }

    @Override
    void begin() throws SQLException {
        conn.setAutoCommit(false);
    }

    @Override
    public boolean readOnly() throws XAException {
        try {
            refuseFailed("commit");
        } catch (SQLException e) {
            throw xa(XAException.XA_RBROLLBACK, e.getMessage(), null);
        }
        if (wrote) {
            return false; // no round trip: an update ran
        }
        try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery("SELECT txid_current_if_assigned() IS NULL")) {
            rs.next();
            return rs.getBoolean(1);
        } catch (SQLException e) {
            throw xa(errorCode(e), "rm \"" + rm + "\": read-only check of " + xid, e);
        }
    }

    @Override
    boolean statementFailedEarlier() {
        try {
            return conn.isWrapperFor(BaseConnection.class) && conn.unwrap(BaseConnection.class).getTransactionState() == TransactionState.FAILED;
        } catch (SQLException e) {
            return false; // not pgjdbc: nothing to read
        }
    }

    /**
     * PREPARE TRANSACTION in a failed transaction rolls it back instead (and
     * answers no error), so a failed transaction is refused here.
     */
    private void refuseFailed(String what) throws SQLException {
        if (conn.isWrapperFor(BaseConnection.class)
                && conn.unwrap(BaseConnection.class).getTransactionState() == TransactionState.FAILED) {
            throw new SQLException("rm \"" + rm + "\": " + what + " refused: a statement of the transaction failed, so PostgreSQL can only roll it back", "25P02");
        }
    }

    /**
     * Dooms the global transaction when the backend is outside a transaction
     * block after a statement of the active branch (pgjdbc's transaction
     * status, from the server's ReadyForQuery: no round trip): the statement
     * ended the branch's transaction (COMMIT, END, ROLLBACK, ABORT text), so
     * what it wrote may have committed or rolled back on its own, and a
     * PREPARE now would prepare only what follows.
     */
    @Override
    void statementRan() {
        try {
            if (state == State.ACTIVE && conn.isWrapperFor(BaseConnection.class)
                    && conn.unwrap(BaseConnection.class).getTransactionState() == TransactionState.IDLE) {
                doom.accept("the branch on rm \"" + rm + "\" is outside its transaction after a statement (transaction control in"
                        + " the SQL: COMMIT, END, ROLLBACK, ABORT?): what it wrote before may have committed or rolled back on its own");
            }
        } catch (SQLException ignored) {
            // not pgjdbc: nothing to read
        }
    }

    @Override
    void prepareSql() throws SQLException {
        refuseFailed("PREPARE TRANSACTION");
        exec("PREPARE TRANSACTION '" + xid.postgresGid() + "'");
        conn.setAutoCommit(true); // the session is idle now: nothing is sent
    }

    @Override
    void commitOnePhaseSql() throws SQLException {
        refuseFailed("COMMIT");
        conn.commit();
        conn.setAutoCommit(true);
    }

    @Override
    void rollbackActiveSql() throws SQLException {
        conn.rollback();
        conn.setAutoCommit(true);
    }

    /**
     * One execute of the statements joined: pgjdbc sends them in one round
     * trip with one Sync, and PostgreSQL skips the rest of them after the
     * first error, so a failed INSERT never reaches the COMMIT.
     */
    @Override
    void commitDecisionSql(java.util.List<String> stmts) throws SQLException {
        refuseFailed("the commit point's COMMIT");
        exec(String.join("; ", stmts));
        conn.setAutoCommit(true); // committed: the session is idle, nothing is sent
    }

    @Override
    String commitPreparedSql() {
        return "COMMIT PREPARED '" + xid.postgresGid() + "'";
    }

    @Override
    String rollbackPreparedSql() {
        return "ROLLBACK PREPARED '" + xid.postgresGid() + "'";
    }

    /** SQLSTATE 42704: "prepared transaction with identifier ... does not exist". */
    @Override
    boolean notFound(SQLException e) {
        return "42704".equals(e.getSQLState());
    }
}
