package io.github.tandemtx.bench;

import io.github.tandemtx.jta.TandemConfig;
import io.github.tandemtx.jta.TandemDataSource;
import io.github.tandemtx.jta.TandemTransactionManager;
import jakarta.transaction.Status;
import java.sql.Connection;
import java.sql.PreparedStatement;
import org.mariadb.jdbc.MariaDbDataSource;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * tandem: the same inserts as one JTA transaction through tandem-jta and a
 * Tandem coordinator, written as an application writes it: {@code tm.begin()},
 * a connection from each {@link TandemDataSource} (which enlists it), plain
 * JDBC, {@code tm.commit()}. The pools hold one connection per thread and
 * database, so each thread works on connections of its own, as in the other
 * workloads; tandem-jta picks the commit path. As "tandem" it decides at
 * MariaDB's commit point (PostgreSQL prepares, MariaDB's COMMIT with its
 * decision row decides, PostgreSQL commits; no coordinator call); as
 * "tandem-coord" ({@code DecideAt.COORDINATOR}) both prepare in parallel,
 * one Commit RPC decides, then phase 2.
 */
final class Tandem implements Workload {
    private final TandemTransactionManager tm;
    private final TandemDataSource pg, maria;
    private final String name;

    private Tandem(String name, TandemTransactionManager tm, TandemDataSource pg, TandemDataSource maria) {
        this.name = name;
        this.tm = tm;
        this.pg = pg;
        this.maria = maria;
    }

    /**
     * Connects to the coordinator and checks that it serves and knows "pg"
     * and "maria" (its --rm names must be these).
     */
    static Workload workload(String name, Databases db, String coordinator, int threads) throws Main.Fatal {
        TandemConfig.DecideAt where = name.equals("tandem-coord") ? TandemConfig.DecideAt.COORDINATOR : TandemConfig.DecideAt.AUTO;
        TandemTransactionManager tm = TandemTransactionManager.create(TandemConfig.coordinator(coordinator).withDecideAt(where));
        PGSimpleDataSource pgs = new PGSimpleDataSource();
        pgs.setURL(db.pgUrl);
        TandemDataSource pg = TandemDataSource.postgres(tm, Databases.PG, pgs).setMaxPoolSize(threads);
        TandemDataSource maria;
        try {
            // allowMultiQueries: tandem-jta sends XA END with XA PREPARE in one round trip, as tandem-jta's README asks.
            maria = TandemDataSource.mariadb(tm, Databases.MARIA, new MariaDbDataSource(Dsn.withDefault(db.mariaUrl, "allowMultiQueries", "true")))
                    .setMaxPoolSize(threads);
            tm.verify();
        } catch (Exception e) {
            tm.close();
            throw new Main.Fatal(e.getMessage().startsWith("tandem:") ? e.getMessage() : "tandem: " + e.getMessage(), e);
        }
        return new Tandem(name, tm, pg, maria);
    }

    @Override
    public String name() {
        return name;
    }

    @Override
    public String summary() {
        return name.equals("tandem-coord")
                ? "the same inserts as one JTA transaction through tandem-jta, decided by the coordinator"
                : "the same inserts as one JTA transaction through tandem-jta, decided at MariaDB's commit point";
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
                    tm.rollback();
                }
            }

            @Override
            public void close() {}
        };
    }

    @Override
    public void close() {
        Util.closeQuietly(pg, maria);
        tm.close();
    }
}
