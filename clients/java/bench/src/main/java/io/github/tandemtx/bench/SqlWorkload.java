package io.github.tandemtx.bench;

import java.sql.Connection;
import java.sql.PreparedStatement;

/**
 * sql: one insert on each database, then two independent local commits in
 * parallel. Not atomic (a crash between the commits keeps one row): the
 * baseline, as the Go benchmark's sql. Plain DriverManager connections with
 * autocommit off: each insert begins its database's transaction (pgjdbc sends
 * BEGIN with it), so 2 round trips per database, as in Go.
 */
final class SqlWorkload implements Workload {
    private final Databases db;

    SqlWorkload(Databases db) {
        this.db = db;
    }

    @Override
    public String name() {
        return "sql";
    }

    @Override
    public String summary() {
        return "one insert on each database, two independent local commits in parallel (not atomic): the baseline";
    }

    @Override
    public Worker open(int t, Side side) throws Exception {
        W w = new W(side);
        w.connect();
        return w;
    }

    private final class W implements Worker {
        private final Side side;
        private Connection pg, maria;
        private PreparedStatement pgIns, mariaIns;

        W(Side side) {
            this.side = side;
        }

        void connect() throws Exception {
            close();
            pg = db.pg();
            pg.setAutoCommit(false);
            pgIns = pg.prepareStatement(INSERT);
            maria = db.maria();
            maria.setAutoCommit(false);
            mariaIns = maria.prepareStatement(INSERT);
        }

        @Override
        public void txn(long id) throws Exception {
            String v = Workload.value(id);
            pgIns.setLong(1, id);
            pgIns.setString(2, v);
            pgIns.executeUpdate();
            mariaIns.setLong(1, id);
            mariaIns.setString(2, v);
            mariaIns.executeUpdate();
            side.both(pg::commit, maria::commit);
        }

        @Override
        public void recover() throws Exception {
            try {
                pg.rollback();
                maria.rollback();
                if (pg.isValid(2) && maria.isValid(2)) {
                    return;
                }
            } catch (Exception e) {
                // reconnect below
            }
            connect();
        }

        @Override
        public void close() {
            Util.closeQuietly(pg, maria);
        }
    }
}
