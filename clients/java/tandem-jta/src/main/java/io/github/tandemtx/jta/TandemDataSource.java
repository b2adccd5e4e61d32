package io.github.tandemtx.jta;

import jakarta.transaction.RollbackException;
import jakarta.transaction.Status;
import jakarta.transaction.SystemException;
import java.io.PrintWriter;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.SQLFeatureNotSupportedException;
import java.sql.Statement;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.logging.Logger;
import javax.sql.CommonDataSource;
import javax.sql.DataSource;
import javax.sql.XAConnection;
import javax.sql.XADataSource;

/**
 * A pooled {@link DataSource} whose connections join the calling thread's
 * Tandem transaction: inside {@code begin()}/{@code commit()}, the first
 * {@link #getConnection()} begins this resource manager's branch and every
 * later one in the same transaction returns a handle on the same connection
 * (Tandem has one branch per resource manager per transaction). Outside a
 * transaction it hands out ordinary pooled connections in autocommit mode.
 *
 * <p>Inside a transaction, {@code commit()}, {@code rollback()} and
 * {@code setAutoCommit(true)} on a handle throw: the transaction manager ends
 * the transaction. The handle is also what a statement's, and the
 * metadata's, {@code getConnection()} and {@code unwrap(Connection.class)}
 * return (and, on a MariaDB commit point, a result set's
 * {@code getStatement()} is the checked statement); a connection unwrapped to the driver's own type is outside this
 * guard, and ending the transaction through it can split it. Closing a
 * handle does not end the branch; the connection goes back to the pool when
 * the transaction is over, and from then on the transaction's handles and
 * their statements refuse to run ({@code isClosed()} is true): the pool may
 * have given the connection to another transaction.
 *
 * <p>The source is any {@link DataSource} or {@link XADataSource} of the
 * database (pgjdbc's {@code PGSimpleDataSource} or {@code PGXADataSource},
 * MariaDB Connector/J's {@code MariaDbDataSource}); only its plain
 * connections are used: the branch is driven with SQL in Tandem's XID format.
 * For PostgreSQL the driver must be pgjdbc.
 */
public final class TandemDataSource implements DataSource, AutoCloseable {
    /** {@link #setMaxPoolSize(int)}'s default. */
    public static final int DEFAULT_MAX_POOL_SIZE = 16;

    private enum Kind { POSTGRES, MARIADB }

    private static final class Physical {
        final Connection conn;
        final XAConnection owner; // when the source was an XADataSource

        Physical(Connection conn, XAConnection owner) {
            this.conn = conn;
            this.owner = owner;
        }

        /** Gives a clean session back to the source (a pool keeps it; a plain source closes it). */
        void close() {
            try {
                if (owner != null) {
                    owner.close();
                } else {
                    conn.close();
                }
            } catch (SQLException ignored) {
                // the connection is being thrown away
            }
        }

        /**
         * Ends a session whose transaction state is not known to be clean:
         * aborted, never lent again by a pooling source ({@link Sessions#abort}).
         */
        void discard() {
            Sessions.abort(conn);
            if (owner != null) {
                try {
                    owner.close();
                } catch (SQLException ignored) {
                    // aborted already
                }
            }
        }
    }

    private final TandemTransactionManager tm;
    private final String rm;
    private final Kind kind;
    private final CommonDataSource source;
    private final ResourceManager info;
    /** Connections kept for the next transaction: only over a source that does not pool ({@link #giveBack}). */
    private final ConcurrentLinkedDeque<Physical> idle = new ConcurrentLinkedDeque<>();
    private volatile Semaphore permits = new Semaphore(DEFAULT_MAX_POOL_SIZE);
    private volatile int maxPoolSize = DEFAULT_MAX_POOL_SIZE;
    private volatile long acquireTimeoutMillis = 30_000;
    private volatile boolean closed;
    /**
     * The source is a pool of its own (HikariCP, DBCP, …): a connection
     * whose transaction is over goes back to it ({@link #giveBack}). With a
     * driver's plain data source, closing would end the session and the
     * next transaction would log in again: it is kept idle here.
     */
    private volatile boolean sourcePools;
    /** The source has given a connection: later ones are opened concurrently. */
    private volatile boolean primed;
    private final Object primeLock = new Object();

    private TandemDataSource(TandemTransactionManager tm, String rm, Kind kind, CommonDataSource source) {
        TandemXid.validateRmName(rm);
        if (!(source instanceof DataSource) && !(source instanceof XADataSource)) {
            throw new IllegalArgumentException("TandemDataSource \"" + rm + "\": the source must be a DataSource or an XADataSource, got "
                    + (source == null ? "null" : source.getClass().getName()));
        }
        this.tm = tm;
        this.rm = rm;
        this.kind = kind;
        this.source = source;
        this.sourcePools = knownPool(source);
        this.info = new ResourceManager(rm, kind == Kind.POSTGRES ? DecisionTable.Dialect.POSTGRES : DecisionTable.Dialect.MARIADB,
                ResourceManager.describe(source), this::openOwn);
        tm.registerRm(info, source);
    }

    /**
     * A new connection straight from the source, outside the pool: the
     * transaction manager's own (taking a commit point's decision key,
     * deleting decided rows), closed by its user.
     */
    private Connection openOwn() throws SQLException {
        if (source instanceof DataSource ds) {
            return ds.getConnection();
        }
        XAConnection xc = ((XADataSource) source).getXAConnection();
        Connection c = xc.getConnection();
        return (Connection) Proxy.newProxyInstance(Connection.class.getClassLoader(), new Class<?>[] {Connection.class}, (proxy, m, args) -> {
            if (m.getName().equals("close")) {
                xc.close();
                return null;
            }
            try {
                return m.invoke(c, args);
            } catch (InvocationTargetException e) {
                throw e.getCause();
            }
        });
    }

    /**
     * A data source for the PostgreSQL resource manager named rm (its name in
     * the coordinator's {@code --rm rm=postgres:...}), over pgjdbc's source.
     *
     * @throws IllegalStateException when tm already has an open
     *     TandemDataSource named rm (one per database: a transaction's
     *     branch on rm is found by name)
     */
    public static TandemDataSource postgres(TandemTransactionManager tm, String rm, CommonDataSource source) {
        return new TandemDataSource(tm, rm, Kind.POSTGRES, source);
    }

    /**
     * A data source for the MariaDB (or MySQL) resource manager named rm (its
     * name in the coordinator's {@code --rm rm=mysql:...}).
     *
     * @throws IllegalStateException when tm already has an open
     *     TandemDataSource named rm
     */
    public static TandemDataSource mariadb(TandemTransactionManager tm, String rm, CommonDataSource source) {
        return new TandemDataSource(tm, rm, Kind.MARIADB, source);
    }

    /** The resource manager's name. */
    public String rmName() {
        return rm;
    }

    /** What the transaction manager knows of this resource manager (tests). */
    ResourceManager resourceManager() {
        return info;
    }

    /** Caps the connections open at once (in use and idle); set it before use. */
    public TandemDataSource setMaxPoolSize(int n) {
        if (n < 1) {
            throw new IllegalArgumentException("TandemDataSource \"" + rm + "\": pool size must be at least 1, got " + n);
        }
        maxPoolSize = n;
        permits = new Semaphore(n);
        return this;
    }

    /** Class names of data sources that pool their connections. */
    private static final String[] POOLS = {"com.zaxxer.hikari.HikariDataSource", "org.apache.commons.dbcp2.BasicDataSource",
            "org.apache.commons.dbcp2.PoolingDataSource", "org.apache.tomcat.jdbc.pool.DataSource", "com.mchange.v2.c3p0.ComboPooledDataSource",
            "io.agroal.api.AgroalDataSource", "org.vibur.dbcp.ViburDBCPDataSource", "oracle.ucp.jdbc.PoolDataSource"};

    /** Whether source is, or wraps (Spring's proxies), one of the known pools. */
    static boolean knownPool(CommonDataSource source) {
        for (String name : POOLS) {
            try {
                Class<?> c = Class.forName(name, false, source.getClass().getClassLoader());
                if (c.isInstance(source) || (source instanceof DataSource ds && ds.isWrapperFor(c))) {
                    return true;
                }
            } catch (ClassNotFoundException | LinkageError | SQLException ignored) {
                // not on the class path, or the source cannot tell: not this one
            }
        }
        return false;
    }

    /**
     * Says whether the source pools its connections (detected for HikariCP,
     * DBCP2, Tomcat JDBC, c3p0, Agroal, Vibur and UCP, also behind a wrapper
     * that answers {@code isWrapperFor}). A pooling source gets every clean
     * connection back as soon as its transaction is over, and keeps the idle
     * ones itself (checking them before lending them again, retiring them at
     * their lifetime, lending them to whoever waits there); this pool then
     * keeps none idle. A plain source's sessions are kept idle here (closing
     * one would mean a new login).
     */
    public TandemDataSource setSourcePools(boolean pools) {
        sourcePools = pools;
        return this;
    }

    /** How long {@link #getConnection()} waits for a free connection when the pool is full. */
    public TandemDataSource setAcquireTimeout(java.time.Duration d) {
        acquireTimeoutMillis = d.toMillis();
        return this;
    }

    /** The most connections open at once ({@link #setMaxPoolSize}). */
    public int maxPoolSize() {
        return maxPoolSize;
    }

    /** How long {@link #getConnection()} waits for a free connection ({@link #setAcquireTimeout}). */
    public java.time.Duration acquireTimeout() {
        return java.time.Duration.ofMillis(acquireTimeoutMillis);
    }

    /** Whether the source is taken for a pool of its own ({@link #setSourcePools}). */
    public boolean sourcePools() {
        return sourcePools;
    }

    @Override
    public Connection getConnection() throws SQLException {
        TandemTransaction tx = tm.current();
        if (tx == null) {
            Physical p = acquire();
            return handle(p, null);
        }
        int st = tx.getStatus();
        if (st != Status.STATUS_ACTIVE && st != Status.STATUS_MARKED_ROLLBACK) {
            throw new SQLException("TandemDataSource \"" + rm + "\": transaction " + tx.gtrid() + " is "
                    + TandemTransaction.statusName(st) + ": no new connection can join it", "25000");
        }
        TandemResource r = tx.resourceFor(rm);
        if (r instanceof SqlBranch b) {
            return handle(null, b);
        }
        Physical p = acquire();
        SqlBranch b = kind == Kind.POSTGRES
                ? new PostgresBranch(info, p.conn, done -> giveBack(p, done.reusable()))
                : new MariaDbBranch(info, p.conn, done -> giveBack(p, done.reusable()));
        try {
            tx.enlistResource(b);
        } catch (RollbackException | SystemException | IllegalStateException e) {
            giveBack(p, false);
            throw new SQLException("TandemDataSource \"" + rm + "\": could not join transaction " + tx.gtrid() + ": " + e.getMessage(), "25000", e);
        }
        return handle(null, b);
    }

    @Override
    public Connection getConnection(String username, String password) throws SQLException {
        throw new SQLFeatureNotSupportedException("TandemDataSource \"" + rm + "\": set the credentials on the source data source");
    }

    private Physical acquire() throws SQLException {
        if (closed) {
            throw new SQLException("TandemDataSource \"" + rm + "\" is closed", "08003");
        }
        Semaphore s = permits;
        try {
            if (!s.tryAcquire(acquireTimeoutMillis, TimeUnit.MILLISECONDS)) {
                throw new SQLException("TandemDataSource \"" + rm + "\": all " + maxPoolSize + " connections in use for "
                        + acquireTimeoutMillis + "ms; raise setMaxPoolSize or close connections (end transactions) sooner", "08001");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new SQLException("TandemDataSource \"" + rm + "\": interrupted waiting for a connection", "08001", e);
        }
        try {
            Physical p = pollIdle();
            if (p != null) {
                return p;
            }
        } catch (SQLException | RuntimeException e) {
            s.release();
            throw e;
        }
        try {
            if (!primed) {
                // The source's first connection is opened by one thread at a
                // time: a driver's data source that configures itself at first
                // use may not do it safely (MariaDB Connector/J 3.x's
                // MariaDbDataSource, opened by 16 threads at once, logged some
                // in as root without a password).
                synchronized (primeLock) {
                    Physical first = open();
                    primed = true;
                    return first;
                }
            }
            return open();
        } catch (SQLException | RuntimeException e) {
            s.release();
            throw e;
        }
    }

    /** A new connection from the source. */
    private Physical open() throws SQLException {
        if (source instanceof DataSource ds) {
            return new Physical(ds.getConnection(), null);
        }
        XAConnection xc = ((XADataSource) source).getXAConnection();
        return new Physical(xc.getConnection(), xc);
    }

    /** An idle connection that is still open, or null; closed ones are discarded. */
    private Physical pollIdle() throws SQLException {
        Physical p;
        while ((p = idle.pollFirst()) != null) {
            if (!p.conn.isClosed()) {
                return p;
            }
            p.discard();
        }
        return null;
    }

    /**
     * Takes back a connection whose transaction is over. A reusable one (its
     * session is outside any transaction: {@link SqlBranch#reusable()}) goes
     * back to the source when the source pools ({@link #setSourcePools}):
     * the source's pool keeps it idle, checks it before lending it again and
     * lends it to a thread that may be waiting there (HikariCP smaller than
     * this pool); kept idle here as well, it would be lent again unchecked
     * (its session possibly ended by the server meanwhile) and counted in use
     * by the source's pool. Over a plain source it is kept idle here. Any
     * other is discarded ({@link Physical#discard}): a session whose state is
     * unknown never goes back to a pool.
     */
    private void giveBack(Physical p, boolean reusable) {
        try {
            if (!reusable || closed) {
                if (reusable) {
                    p.close();
                } else {
                    p.discard();
                }
                return;
            }
            if (!p.conn.getAutoCommit()) {
                p.conn.rollback();
                p.conn.setAutoCommit(true);
            }
            if (sourcePools) {
                p.close();
                return;
            }
            idle.addFirst(p);
        } catch (SQLException | RuntimeException e) {
            p.discard();
        } finally {
            permits.release();
        }
    }

    /** A handle: pooled (branch == null) or on a transaction's branch. */
    private Connection handle(Physical pooled, SqlBranch branch) {
        Connection target = branch != null ? branch.connection() : pooled.conn;
        InvocationHandler h = new InvocationHandler() {
            private boolean handleClosed;

            @Override
            public Object invoke(Object proxy, Method m, Object[] args) throws Throwable {
                String name = m.getName();
                switch (name) {
                    case "close":
                        if (!handleClosed) {
                            handleClosed = true;
                            if (pooled != null) {
                                giveBack(pooled, !pooled.conn.isClosed());
                            }
                        }
                        return null;
                    case "isClosed":
                        return handleClosed || branch != null && branch.over || target.isClosed();
                    case "equals":
                        return proxy == args[0];
                    case "hashCode":
                        return System.identityHashCode(proxy);
                    case "toString":
                        return "TandemConnection{" + rm + (branch != null ? ", in " + branch.xid : "") + "}";
                    case "unwrap":
                        // JDBC's generic way back to "the connection" (Connection,
                        // Wrapper) is this handle, whose commit, rollback and
                        // autocommit are guarded; a driver's own type passes through.
                        if (((Class<?>) args[0]).isInstance(proxy)) {
                            return proxy;
                        }
                        break;
                    case "isWrapperFor":
                        if (((Class<?>) args[0]).isInstance(proxy)) {
                            return true;
                        }
                        break;
                    default:
                }
                if (handleClosed) {
                    throw new SQLException("TandemDataSource \"" + rm + "\": connection handle already closed", "08003");
                }
                if (branch != null && branch.over) {
                    switch (name) {
                        case "isValid" -> {
                            return false;
                        }
                        case "getWarnings", "clearWarnings" -> {
                            return null; // a framework's clean-up after the transaction
                        }
                        default -> refuseOver(branch);
                    }
                }
                if (branch != null) {
                    switch (name) {
                        case "commit", "rollback" -> {
                            if (args == null || args.length == 0) {
                                throw new SQLException("TandemDataSource \"" + rm + "\": this connection is in global transaction "
                                        + branch.xid.gtrid() + ": end it with the transaction manager's commit or rollback", "25000");
                            }
                        }
                        case "setAutoCommit" -> {
                            if ((Boolean) args[0]) {
                                throw new SQLException("TandemDataSource \"" + rm + "\": this connection is in global transaction "
                                        + branch.xid.gtrid() + ": autocommit cannot be turned on", "25000");
                            }
                            return null;
                        }
                        case "getAutoCommit" -> {
                            return false;
                        }
                        case "prepareStatement", "prepareCall" -> refuseImplicitCommit(branch, args);
                        default -> {
                        }
                    }
                }
                Object result;
                try {
                    result = m.invoke(target, args);
                } catch (InvocationTargetException e) {
                    if (branch != null && e.getCause() instanceof SQLException se) {
                        branch.statementFailed(se);
                    }
                    throw e.getCause();
                }
                if (result instanceof Statement st && m.getReturnType().isInterface()) {
                    return statement(st, m.getReturnType(), (Connection) proxy, branch);
                }
                if (result instanceof DatabaseMetaData md) {
                    return metaData(md, (Connection) proxy);
                }
                return result;
            }
        };
        return (Connection) Proxy.newProxyInstance(Connection.class.getClassLoader(), new Class<?>[] {Connection.class}, h);
    }

    /**
     * Wraps a statement so that its getConnection() is the handle and, on a
     * branch, an update marks the branch as a writer (a PostgreSQL branch
     * then needs no read-only check at commit: one round trip less).
     */
    private static Object statement(Statement st, Class<?> type, Connection handle, SqlBranch branch) {
        InvocationHandler h = (proxy, m, args) -> {
            String name = m.getName();
            switch (name) {
                case "getConnection":
                    return handle;
                case "close", "isClosed", "equals", "hashCode", "toString", "getWarnings", "clearWarnings":
                    break;
                default:
                    refuseOver(branch);
            }
            switch (name) {
                case "executeUpdate", "executeLargeUpdate", "executeBatch", "executeLargeBatch":
                    refuseImplicitCommit(branch, args);
                    if (branch != null) {
                        branch.wrote = true;
                    }
                    break;
                case "execute", "executeQuery", "addBatch":
                    refuseImplicitCommit(branch, args);
                    break;
                case "unwrap":
                    if (((Class<?>) args[0]).isInstance(proxy)) {
                        return proxy; // JDBC's own interfaces: this checked statement
                    }
                    break;
                case "equals":
                    return proxy == args[0];
                case "hashCode":
                    return System.identityHashCode(proxy);
                default:
            }
            Object result;
            try {
                result = m.invoke(st, args);
            } catch (InvocationTargetException e) {
                if (branch != null && e.getCause() instanceof SQLException se) {
                    branch.statementFailed(se);
                }
                throw e.getCause();
            }
            if (branch != null && name.startsWith("execute")) {
                branch.statementRan();
            }
            if (result instanceof ResultSet rs && branch instanceof MariaDbBranch) {
                // On MariaDB only, where any error dooms the transaction: a proxy costs on every row.
                return resultSet(rs, (Statement) proxy, branch);
            }
            return result;
        };
        return Proxy.newProxyInstance(Statement.class.getClassLoader(), new Class<?>[] {type}, h);
    }

    /**
     * Wraps a ResultSet so that its getStatement() is the checked statement,
     * not the driver's, and its errors (a streamed result's) reach the branch.
     */
    private static ResultSet resultSet(ResultSet rs, Statement checked, SqlBranch branch) {
        InvocationHandler h = (proxy, m, args) -> {
            switch (m.getName()) {
                case "getStatement":
                    return checked;
                case "unwrap":
                    if (((Class<?>) args[0]).isInstance(proxy)) {
                        return proxy;
                    }
                    break;
                case "equals":
                    return proxy == args[0];
                case "hashCode":
                    return System.identityHashCode(proxy);
                default:
            }
            try {
                return m.invoke(rs, args);
            } catch (InvocationTargetException e) {
                if (e.getCause() instanceof SQLException se) {
                    branch.statementFailed(se);
                }
                throw e.getCause();
            }
        };
        return (ResultSet) Proxy.newProxyInstance(ResultSet.class.getClassLoader(), new Class<?>[] {ResultSet.class}, h);
    }

    /** Refuses to use a branch's connection once its transaction is over: the pool may have given it to another. */
    private static void refuseOver(SqlBranch branch) throws SQLException {
        if (branch != null && branch.over) {
            throw new SQLException("TandemDataSource \"" + branch.rm + "\": this connection belonged to transaction " + branch.xid.gtrid()
                    + ", which is over: get a new connection (and close handles before the transaction ends)", "08003");
        }
    }

    /** Wraps a DatabaseMetaData so that its getConnection() is the handle, not the driver's connection. */
    private static DatabaseMetaData metaData(DatabaseMetaData md, Connection handle) {
        InvocationHandler h = (proxy, m, args) -> {
            switch (m.getName()) {
                case "getConnection":
                    return handle;
                case "equals":
                    return proxy == args[0];
                case "hashCode":
                    return System.identityHashCode(proxy);
                default:
            }
            try {
                return m.invoke(md, args);
            } catch (InvocationTargetException e) {
                throw e.getCause();
            }
        };
        return (DatabaseMetaData) Proxy.newProxyInstance(DatabaseMetaData.class.getClassLoader(), new Class<?>[] {DatabaseMetaData.class}, h);
    }

    /** The early checks of the SQL sent on a branch (tests turn them off to show what the databases do without them). */
    static volatile boolean earlyChecks = true;

    /**
     * Refuses, before it is sent, SQL that would end a branch's transaction:
     * on a MariaDB commit point, what MariaDB runs as an implicit commit
     * (DDL, LOCK TABLES, COMMIT, SET autocommit, …; {@link ImplicitCommit}),
     * a clearer error than the server's own refusal inside the XA branch
     * (XAER_RMFAIL); on a PostgreSQL branch, transaction control
     * ({@link PgTransactionControl}), which PostgreSQL would run, ending the
     * branch early. The transaction is unchanged.
     */
    private static void refuseImplicitCommit(SqlBranch branch, Object[] args) throws SQLException {
        if (branch == null || !earlyChecks || args == null || args.length == 0 || !(args[0] instanceof String sql)) {
            return;
        }
        if (branch instanceof PostgresBranch) {
            String stmt = PgTransactionControl.find(sql);
            if (stmt != null) {
                throw new SQLException(PgTransactionControl.refusal(branch.rm, stmt), "25000");
            }
            return;
        }
        if (!branch.isPoint()) {
            return;
        }
        String stmt = ImplicitCommit.endsTransaction(sql);
        if (stmt != null) {
            throw new SQLException(ImplicitCommit.refusal(branch.rm, stmt), "25000");
        }
    }

    /**
     * Closes the idle connections (connections in use close when given
     * back), and gives the resource manager's name back to the transaction
     * manager: another TandemDataSource may then be made under it. Branches
     * already enlisted go on to their transaction's end.
     */
    @Override
    public void close() {
        closed = true;
        tm.unregisterRm(info);
        Physical p;
        while ((p = idle.pollFirst()) != null) {
            p.close();
        }
    }

    @Override
    public PrintWriter getLogWriter() {
        return null;
    }

    @Override
    public void setLogWriter(PrintWriter out) {
    }

    @Override
    public void setLoginTimeout(int seconds) {
    }

    @Override
    public int getLoginTimeout() {
        return 0;
    }

    @Override
    public Logger getParentLogger() throws SQLFeatureNotSupportedException {
        throw new SQLFeatureNotSupportedException();
    }

    @Override
    public <T> T unwrap(Class<T> iface) throws SQLException {
        if (iface.isInstance(this)) {
            return iface.cast(this);
        }
        if (iface.isInstance(source)) {
            return iface.cast(source);
        }
        throw new SQLException("TandemDataSource does not wrap " + iface.getName());
    }

    @Override
    public boolean isWrapperFor(Class<?> iface) {
        return iface.isInstance(this) || iface.isInstance(source);
    }
}
