package io.github.tandemtx.bench;

import com.atomikos.icatch.jta.UserTransactionManager;
import com.atomikos.jdbc.AtomikosDataSourceBean;
import jakarta.transaction.Status;
import java.io.PrintStream;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.PreparedStatement;
import org.mariadb.jdbc.MariaDbDataSource;
import org.postgresql.xa.PGXADataSource;

/**
 * atomikos: the same inserts as one JTA transaction through Atomikos
 * TransactionsEssentials 6 (the jakarta build), written as an application
 * using Atomikos writes it: {@code utm.begin()}, a connection from each
 * {@link AtomikosDataSourceBean} (Atomikos's own XA-aware pool, which
 * enlists it), plain JDBC, {@code utm.commit()}. The pools wrap pgjdbc's
 * PGXADataSource and MariaDB Connector/J's MariaDbDataSource and hold as many
 * connections as there are threads (minimum and maximum: its default maximum
 * is 1), so no thread waits for one; which thread gets which connection is
 * the pool's business. Everything else is Atomikos's default: its file log
 * (tmlog, every write forced), two-phase commit one resource after the
 * other, max_actives 50, a 10 s transaction timeout.
 *
 * <p>The log is a directory of its own ({@code .tandem-bench-atomikos-*}
 * under --dir: com.atomikos.icatch.log_base_dir). Atomikos's configuration is
 * per JVM.
 */
final class Atomikos implements Workload {
    /**
     * Its INFO lines (start, stop, recovery passes; none per transaction)
     * would fill stderr: warnings only. Held here, as java.util.logging keeps
     * loggers weakly.
     */
    private static final java.util.logging.Logger QUIET = java.util.logging.Logger.getLogger("com.atomikos");

    private final UserTransactionManager tm;
    private final AtomikosDataSourceBean pg, maria;
    private final TmDir dir;

    private Atomikos(UserTransactionManager tm, AtomikosDataSourceBean pg, AtomikosDataSourceBean maria, TmDir dir) {
        this.tm = tm;
        this.pg = pg;
        this.maria = maria;
        this.dir = dir;
    }

    /** Starts Atomikos with its log in a new directory under {@code parent}, and its two pools of {@code threads} connections. */
    static Workload workload(Databases db, Path parent, int threads, PrintStream log) throws Main.Fatal {
        QUIET.setLevel(java.util.logging.Level.WARNING);
        TmDir dir = TmDir.create(parent, "atomikos", log);
        // Read by Atomikos's configuration when the transaction service starts (system properties override its defaults).
        System.setProperty("com.atomikos.icatch.log_base_dir", dir.path().toString());
        // Only silences the "Thanks for using Atomikos! … not registered" banner it prints on System.out.
        System.setProperty("com.atomikos.icatch.registered", "true");
        UserTransactionManager tm = new UserTransactionManager();
        AtomikosDataSourceBean pg = null, maria = null;
        try {
            tm.init();
            PGXADataSource pgx = new PGXADataSource();
            pgx.setURL(db.pgUrl);
            pg = pool(Databases.PG, pgx, threads);
            maria = pool(Databases.MARIA, new MariaDbDataSource(db.mariaUrl), threads);
            return new Atomikos(tm, pg, maria, dir);
        } catch (Exception e) {
            if (pg != null) {
                pg.close();
            }
            tm.close();
            dir.close();
            throw new Main.Fatal("atomikos: cannot start Atomikos or its pools: " + Main.describe(e), e);
        }
    }

    private static AtomikosDataSourceBean pool(String name, javax.sql.XADataSource xa, int threads) throws Exception {
        AtomikosDataSourceBean ds = new AtomikosDataSourceBean();
        ds.setUniqueResourceName(name);
        ds.setXaDataSource(xa);
        ds.setMinPoolSize(threads);
        ds.setMaxPoolSize(threads);
        ds.init();
        return ds;
    }

    @Override
    public String name() {
        return "atomikos";
    }

    @Override
    public String summary() {
        return "the same inserts as one JTA transaction through Atomikos, its defaults and its pools (AtomikosDataSourceBean)";
    }

    @Override
    public Worker open(int t, Side side) {
        return new Worker() {
            @Override
            public void txn(long id) throws Exception {
                String v = Workload.value(id);
                tm.begin();
                try (Connection a = pg.getConnection(); PreparedStatement pa = a.prepareStatement(INSERT)) {
                    pa.setLong(1, id);
                    pa.setString(2, v);
                    pa.executeUpdate();
                    try (Connection b = maria.getConnection(); PreparedStatement pb = b.prepareStatement(INSERT)) {
                        pb.setLong(1, id);
                        pb.setString(2, v);
                        pb.executeUpdate();
                    }
                } catch (Exception e) {
                    tm.rollback();
                    throw e;
                }
                tm.commit();
            }

            @Override
            public void recover() throws Exception {
                if (tm.getStatus() != Status.STATUS_NO_TRANSACTION) {
                    try {
                        tm.rollback();
                    } catch (Exception e) {
                        tm.suspend(); // let go of it: the thread must be free for the next one
                    }
                }
            }

            @Override
            public void close() {}
        };
    }

    /** Closes the pools and the transaction service (which waits for active transactions), then removes the log. */
    @Override
    public void close() {
        try {
            pg.close();
            maria.close();
            tm.close();
        } finally {
            dir.close();
        }
    }
}
