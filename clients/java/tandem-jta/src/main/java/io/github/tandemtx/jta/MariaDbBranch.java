package io.github.tandemtx.jta;

import java.sql.Connection;
import java.sql.SQLException;
import java.util.function.Consumer;

/**
 * A MariaDB (or MySQL) XA branch over one connection, named
 * {@code '<gtrid>','<rm>',1413566020}. MariaDB binds a prepared branch to the
 * session that prepared it, so this branch is {@link #sessionBound()}: it is
 * committed here right after the coordinator's decision, and if it cannot be,
 * the session is closed, which detaches the branch for the coordinator.
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
        if (plain) {
            steps(DecisionTable.mariadbBegin().toArray(new String[0]));
            return;
        }
        exec("XA START " + xid.mysqlXid());
    }

    @Override
    void prepareSql() throws SQLException {
        steps("XA END " + xid.mysqlXid(), "XA PREPARE " + xid.mysqlXid());
    }

    @Override
    void commitOnePhaseSql() throws SQLException {
        if (plain) {
            if (ended != null) {
                // COMMIT would succeed, committing nothing: the writes are gone.
                throw new SQLException("rm \"" + rm + "\": the transaction cannot commit: " + ended, "40000");
            }
            exec("COMMIT");
            return;
        }
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
        if (plain) {
            exec("ROLLBACK");
            return;
        }
        try {
            exec("XA END " + xid.mysqlXid());
        } catch (SQLException e) {
            if (errorCode(e) != javax.transaction.xa.XAException.XA_RBROLLBACK) {
                throw e;
            }
            // The branch had already ended (a failed XA PREPARE): roll back alone.
        }
        exec("XA ROLLBACK " + xid.mysqlXid());
    }

    /**
     * Dooms the global transaction: after an error MariaDB may have rolled
     * back the statement only, or the whole transaction (a deadlock's
     * victim, a lock wait timeout under innodb_rollback_on_timeout), so no
     * commit can keep a known part of the work. A plain commit point also
     * asks the session whether its transaction is still open: if not, the
     * session is in autocommit, where the next statement would commit at
     * once, and {@link #ended} refuses every statement.
     */
    @Override
    void statementFailed(SQLException e) {
        if (state != State.ACTIVE) {
            return;
        }
        doom.accept("a call on rm \"" + rm + "\" failed, and after an error MariaDB may have rolled back the statement or the whole"
                + " transaction, so the global transaction cannot commit: " + e.getMessage());
        if (!plain || ended != null) {
            return;
        }
        try (java.sql.Statement st = conn.createStatement(); java.sql.ResultSet rs = st.executeQuery("SELECT @@in_transaction")) {
            if (rs.next() && rs.getInt(1) == 1) {
                return;
            }
            ended = "MariaDB rolled the transaction back after a failed statement (a deadlock's victim, or a lock wait timeout"
                    + " with innodb_rollback_on_timeout)";
        } catch (SQLException q) {
            ended = "asking MariaDB whether the transaction is still open after a failed statement failed: " + q.getMessage();
        }
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
