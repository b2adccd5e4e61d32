package io.github.tandemtx.jta;

import java.sql.Connection;
import java.sql.SQLException;
import java.util.function.Consumer;

/**
 * A MariaDB (or MySQL) XA branch over one connection, named as
 * {@link TandemXid} says (owned: format TAN2 or TAC2). MariaDB binds a
 * prepared branch to the session that prepared it, so this branch is
 * {@link #sessionBound()}: it is committed here right after the decision,
 * and if it cannot be, the session is ended, which detaches the branch for
 * the coordinator.
 *
 * <p>The commit point's own branch ({@link #point}) is an XA branch too,
 * never prepared: decided by {@code INSERT …; XA END …; XA COMMIT … ONE
 * PHASE} in one round trip. Inside it MariaDB itself refuses every
 * statement that would end the transaction (XAER_RMFAIL), and a deadlock
 * leaves it rollback-only instead of ending it.
 */
final class MariaDbBranch extends SqlBranch {
    MariaDbBranch(ResourceManager info, Connection conn, Consumer<SqlBranch> onCompleted) {
        super(info, conn, onCompleted);
    }

    @Override
    public boolean sessionBound() {
        return true;
    }

    /** Telling whether an XA branch wrote needs the PROCESS privilege: every MariaDB branch counts as a writer. */
    @Override
    public boolean readOnly() {
        return false;
    }

    @Override
    void begin() throws SQLException {
        if (!conn.getAutoCommit()) {
            conn.setAutoCommit(true);
        }
        if (point) {
            steps(DecisionTable.mariadbBegin(xid.mysqlXid()).toArray(new String[0]));
            return;
        }
        exec("XA START " + xid.mysqlXid());
    }

    @Override
    void prepareSql() throws SQLException {
        steps("XA END " + xid.mysqlXid(), "XA PREPARE " + xid.mysqlXid());
    }

    /** The commit point when no other branch wrote, or a read-only branch: no decision row needed. */
    @Override
    void commitOnePhaseSql() throws SQLException {
        steps("XA END " + xid.mysqlXid(), "XA COMMIT " + xid.mysqlXid() + " ONE PHASE");
    }

    Boolean multi; // null until the first steps()

    /**
     * Runs the statements in order: in one round trip when the connection
     * allows several statements at once (Connector/J's allowMultiQueries),
     * else one by one.
     */
    void steps(String... stmts) throws SQLException {
        if (multi == null) {
            multi = conn.isWrapperFor(org.mariadb.jdbc.Connection.class)
                    && conn.unwrap(org.mariadb.jdbc.Connection.class).getContext().getConf().allowMultiQueries();
        }
        if (!multi) {
            for (String s : stmts) {
                exec(s);
            }
            return;
        }
        execAll(String.join("; ", stmts));
    }

    /**
     * Executes a multi-statement and reads every result, so that the error
     * of any statement (the server stops at the first) is thrown here: a
     * failed XA PREPARE after a good XA END must never pass for a prepare.
     */
    void execAll(String sql) throws SQLException {
        try (java.sql.Statement st = conn.createStatement()) {
            st.execute(sql);
            while (st.getMoreResults() || st.getUpdateCount() != -1) {
                // each call reads the next statement's result, or throws its error
            }
        }
    }

    @Override
    void rollbackActiveSql() throws SQLException {
        try {
            exec("XA END " + xid.mysqlXid());
        } catch (SQLException e) {
            if (errorCode(e) != javax.transaction.xa.XAException.XA_RBROLLBACK) {
                throw e;
            }
            // The branch had already ended (a failed XA PREPARE or decision), or is
            // rollback-only (a deadlock's victim): roll back alone.
        }
        exec("XA ROLLBACK " + xid.mysqlXid());
    }

    /**
     * Dooms the global transaction: after an error MariaDB may have rolled
     * back the statement only, or the whole branch (a deadlock's victim, a
     * lock wait timeout under innodb_rollback_on_timeout: the branch is then
     * rollback-only), so no commit can keep a known part of the work.
     */
    @Override
    void statementFailed(SQLException e) {
        if (state != State.ACTIVE) {
            return;
        }
        doom.accept("a call on rm \"" + rm + "\" failed, and after an error MariaDB may have rolled back the statement or the whole"
                + " transaction, so the global transaction cannot commit: " + e.getMessage());
    }

    @Override
    void commitDecisionSql(java.util.List<String> stmts) throws SQLException {
        steps(stmts.toArray(new String[0]));
    }

    @Override
    String commitPreparedSql() {
        return "XA COMMIT " + xid.mysqlXid();
    }

    @Override
    String rollbackPreparedSql() {
        return "XA ROLLBACK " + xid.mysqlXid();
    }

    /** Error 1397, XAER_NOTA "Unknown XID". */
    @Override
    boolean notFound(SQLException e) {
        return e.getErrorCode() == 1397;
    }
}
