package io.github.tandemtx.jta;

import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.function.Consumer;
import javax.transaction.xa.XAException;
import javax.transaction.xa.XAResource;
import javax.transaction.xa.Xid;

/**
 * A branch driven with SQL statements on one JDBC connection. The subclasses
 * give the statements of each database. One instance serves one branch.
 */
abstract sealed class SqlBranch implements TandemResource permits PostgresBranch, MariaDbBranch {
    enum State { IDLE, ACTIVE, PREPARED, DONE }

    final String rm;
    /** The resource manager: its dialect, commit-point eligibility, connections of its own. */
    final ResourceManager info;
    final Connection conn;
    private final Consumer<SqlBranch> onCompleted;
    State state = State.IDLE;
    TandemXid xid;
    boolean released;
    /**
     * The branch is its transaction's commit point on MariaDB, chosen before
     * its begin: an XA branch named {@link TandemXid#commitPointSelf}, never
     * prepared; its INSERT of the decision row and XA COMMIT … ONE PHASE, in
     * one round trip, decide the transaction.
     */
    boolean point;
    /**
     * A statement that writes ran (executeUpdate or a batch through a
     * TandemDataSource handle): the branch is a writer, no need to ask the
     * database. Set by the application's thread before commit.
     */
    volatile boolean wrote;
    /**
     * The transaction is over and the connection went back to its pool
     * (where another transaction may take it): the branch's handles and
     * statements refuse to run.
     */
    volatile boolean over;
    /**
     * Marks the global transaction rollback-only, with the reason; set by
     * the transaction when it enlists the branch.
     */
    volatile java.util.function.Consumer<String> doom = reason -> { };
    private int timeout;

    SqlBranch(ResourceManager info, Connection conn, Consumer<SqlBranch> onCompleted) {
        this.rm = info.name;
        this.info = info;
        this.conn = conn;
        this.onCompleted = onCompleted;
    }

    @Override
    public String rmName() {
        return rm;
    }

    /** The JDBC connection the branch runs on (the application's statements go here too). */
    Connection connection() {
        return conn;
    }

    /** Begins the branch on the database. */
    abstract void begin() throws SQLException;

    /** Phase 1. */
    abstract void prepareSql() throws SQLException, XAException;

    abstract void commitOnePhaseSql() throws SQLException;

    abstract void rollbackActiveSql() throws SQLException;

    abstract String commitPreparedSql();

    abstract String rollbackPreparedSql();

    /** True when e says the branch is unknown to the database. */
    abstract boolean notFound(SQLException e);

    /**
     * Sends the commit point's statements (DecisionTable.commitStatements)
     * in one round trip where the connection allows, stopping at the first
     * error: a failed INSERT never reaches the COMMIT.
     */
    abstract void commitDecisionSql(java.util.List<String> stmts) throws SQLException;

    /**
     * Records COMMIT for the transaction and commits, on this commit point.
     * On an SQLException the COMMIT did not happen when DecisionTable.refused
     * names a reason; otherwise it may have (only taking the key tells).
     */
    void commitDecision(java.util.List<String> stmts) throws SQLException {
        if (state != State.ACTIVE) {
            throw new SQLException("rm \"" + rm + "\": the commit point's branch is " + state + ", not active", "25000");
        }
        commitDecisionSql(stmts);
        state = State.DONE;
    }

    /**
     * Called after the driver threw e for an application's call on the
     * branch (a statement, a result set, the connection). Nothing to do on
     * PostgreSQL: an error the server answered leaves the transaction
     * failed, and its PREPARE or COMMIT is refused. A MariaDB branch dooms
     * the global transaction.
     */
    void statementFailed(SQLException e) {
    }

    /**
     * Whether an earlier statement of the active branch failed so that its
     * transaction can only roll back, as far as the driver knows without a
     * round trip (PostgreSQL; a MariaDB error dooms the transaction at once).
     */
    boolean statementFailedEarlier() {
        return false;
    }

    /** Called after an application's statement on the branch ran. */
    void statementRan() {
    }

    /**
     * Names the branch with the commit point cp whose decision table's id is
     * table (PostgreSQL: before its PREPARE); returns the new XID.
     */
    TandemXid nameCommitPoint(String cp, String table) {
        xid = xid.withCommitPoint(cp, table);
        return xid;
    }

    /**
     * Names the branch as decided by the coordinator whose cluster is owner
     * (null: the legacy name; PostgreSQL: before its PREPARE); returns the
     * new XID.
     */
    TandemXid nameOwner(String owner) {
        xid = xid.ownedBy(owner);
        return xid;
    }

    /** Whether this branch is its transaction's commit point on MariaDB: {@link #point}. */
    boolean isPoint() {
        return point;
    }

    @Override
    public void start(Xid x, int flags) throws XAException {
        if (flags == TMJOIN || flags == TMRESUME) {
            if (state != State.ACTIVE || !x.equals(xid)) {
                throw xa(XAException.XAER_PROTO, "rm \"" + rm + "\": join or resume of a branch that is not active here", null);
            }
            return;
        }
        TandemXid t = TandemXid.from(x);
        if (t == null || !t.rm().equals(rm)) {
            throw xa(XAException.XAER_INVAL, "rm \"" + rm + "\": XID " + x + " is not a Tandem XID for this resource manager", null);
        }
        if (state != State.IDLE) {
            throw xa(XAException.XAER_PROTO, "rm \"" + rm + "\": the connection already carries a branch", null);
        }
        xid = t;
        try {
            begin();
        } catch (SQLException e) {
            throw xa(errorCode(e), "rm \"" + rm + "\": begin branch " + t, e);
        }
        state = State.ACTIVE;
    }

    /** Ending is recorded only: the SQL ending the branch goes with its prepare or commit. */
    @Override
    public void end(Xid x, int flags) throws XAException {
        check(x);
    }

    @Override
    public int prepare(Xid x) throws XAException {
        check(x);
        if (state != State.ACTIVE) {
            throw xa(XAException.XAER_PROTO, "rm \"" + rm + "\": prepare of a branch in state " + state, null);
        }
        try {
            prepareSql();
        } catch (SQLException e) {
            // The branch stays ACTIVE: rollback ends it (the database answered) or
            // the session's end does (the connection broke).
            throw xa(errorCode(e), "rm \"" + rm + "\": prepare " + xid, e);
        }
        state = State.PREPARED;
        return XA_OK;
    }

    @Override
    public void commit(Xid x, boolean onePhase) throws XAException {
        check(x);
        try {
            if (onePhase) {
                if (state != State.ACTIVE) {
                    throw xa(XAException.XAER_PROTO, "rm \"" + rm + "\": one-phase commit of a branch in state " + state, null);
                }
                commitOnePhaseSql();
            } else {
                if (state != State.PREPARED) {
                    throw xa(XAException.XAER_PROTO, "rm \"" + rm + "\": commit of a branch in state " + state, null);
                }
                exec(commitPreparedSql());
            }
            state = State.DONE;
        } catch (SQLException e) {
            if (!onePhase && notFound(e)) {
                // Believed only from a connection that reaches this RM's own
                // decision table (the id a decision row names it by): one
                // that reaches another database says nothing of the branch.
                if (!info.reachesOwnTable(conn)) {
                    throw xa(XAException.XAER_RMFAIL, "rm \"" + rm + "\": commit prepared " + xid + ": the database does not know the branch,"
                            + " but this connection does not reach the decision table with this RM's id (" + info.tableId()
                            + "), so that says nothing: the branch is left to the coordinator", e);
                }
                throw xa(XAException.XAER_NOTA, "rm \"" + rm + "\": commit prepared " + xid + ": the database does not know the branch", e);
            }
            int code = errorCode(e);
            if (onePhase && code == XAException.XA_RBROLLBACK) {
                state = State.DONE;
            }
            throw xa(code, "rm \"" + rm + "\": " + (onePhase ? "one-phase commit " : "commit prepared ") + xid, e);
        }
    }

    @Override
    public void rollback(Xid x) throws XAException {
        check(x);
        try {
            switch (state) {
                case ACTIVE -> rollbackActiveSql();
                case PREPARED -> exec(rollbackPreparedSql());
                default -> {
                    return;
                }
            }
            state = State.DONE;
        } catch (SQLException e) {
            if (notFound(e)) {
                state = State.DONE; // nothing left to roll back
                return;
            }
            throw xa(errorCode(e), "rm \"" + rm + "\": rollback " + xid, e);
        }
    }

    @Override
    public void forget(Xid x) {
    }

    /** Recovery is the coordinator's: it scans every database for Tandem's branches. */
    @Override
    public Xid[] recover(int flag) {
        return new Xid[0];
    }

    @Override
    public boolean isSameRM(XAResource other) {
        return other instanceof TandemResource r && r.rmName().equals(rm);
    }

    @Override
    public int getTransactionTimeout() {
        return timeout;
    }

    @Override
    public boolean setTransactionTimeout(int seconds) {
        timeout = seconds;
        return true;
    }

    @Override
    public void releaseSession() {
        released = true;
        Sessions.abort(conn); // aborted, not closed: a pooling source would lend the session again
    }

    @Override
    public void completed() {
        over = true;
        onCompleted.accept(this);
    }

    /** Whether the connection can go back to its pool. */
    boolean reusable() {
        if (released || state == State.ACTIVE || state == State.PREPARED && sessionBound()) {
            return false;
        }
        try {
            return !conn.isClosed();
        } catch (SQLException e) {
            return false;
        }
    }

    void exec(String sql) throws SQLException {
        try (Statement st = conn.createStatement()) {
            st.execute(sql);
        }
    }

    private void check(Xid x) throws XAException {
        if (xid == null || !xid.equals(x)) {
            throw xa(XAException.XAER_NOTA, "rm \"" + rm + "\": XID " + x + " is not this connection's branch (" + xid + ")", null);
        }
    }

    /**
     * XA_RBROLLBACK when the database answered (the statement's effect is
     * known: it did not happen), XAER_RMFAIL when the connection broke or
     * the statement timed out (it may or may not have happened): the
     * decision table's reading of the same error.
     */
    static int errorCode(SQLException e) {
        return DecisionTable.serverAnswered(e) ? XAException.XA_RBROLLBACK : XAException.XAER_RMFAIL;
    }

    static XAException xa(int code, String msg, Throwable cause) {
        XAException e = new XAException(msg + (cause != null ? ": " + cause.getMessage() : ""));
        e.errorCode = code;
        if (cause != null) {
            e.initCause(cause);
        }
        return e;
    }
}
