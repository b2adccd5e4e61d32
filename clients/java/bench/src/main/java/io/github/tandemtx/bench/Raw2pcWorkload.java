package io.github.tandemtx.bench;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.Statement;
import java.util.HexFormat;

/**
 * raw2pc: the databases' own two-phase commit driven by hand in SQL, with the
 * Go benchmark's statements and round trips, and no coordinator and no
 * decision log: insert on each (PostgreSQL: BEGIN rides with it; MariaDB:
 * {@code XA START …; INSERT …} in one multi-statement), prepare both in
 * parallel (PREPARE TRANSACTION; {@code XA END …; XA PREPARE …}), commit both
 * in parallel (COMMIT PREPARED; XA COMMIT), each on the session that prepared
 * it. 3 round trips to PostgreSQL, 3 to MariaDB. A crash between the commits
 * breaks atomicity: the floor of any XA transaction manager, which tandem-jta
 * (driving its branches in SQL too) can be set against directly.
 *
 * <p>Branch names: PostgreSQL GID {@code bench:<gtrid hex>:pg}; MariaDB XID
 * ('gtrid hex', 'maria', format BENC): never Tandem's, so a coordinator's
 * in-doubt scan leaves them alone, and the setup of the next run (Java's or
 * Go's) rolls back what a run that died left prepared.
 */
final class Raw2pcWorkload implements Workload {
    private final Databases db;

    Raw2pcWorkload(Databases db) {
        this.db = db;
    }

    @Override
    public String name() {
        return "raw2pc";
    }

    @Override
    public String summary() {
        return "the same inserts with the databases' own 2PC in SQL (prepare both, commit both), the Go benchmark's statements: no coordinator, no log";
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
        private PreparedStatement pgIns, mariaStartIns;
        private Statement pgS, mariaS;
        private String pgGid, mariaXid; // the current branches, for recover

        W(Side side) {
            this.side = side;
        }

        void connect() throws Exception {
            close();
            pg = db.pg();
            pg.setAutoCommit(false);
            pgIns = pg.prepareStatement(INSERT);
            pgS = pg.createStatement();
            maria = db.mariaMulti();
            mariaStartIns = maria.prepareStatement("XA START ?, ?, " + Xids.BENCH_FORMAT + "; " + INSERT);
            mariaS = maria.createStatement();
        }

        @Override
        public void txn(long id) throws Exception {
            String v = Workload.value(id);
            String g = HexFormat.of().formatHex(Xids.newGtrid());
            String gid = "'bench:" + g + ":" + Databases.PG + "'";
            String xid = "'" + g + "','" + Databases.MARIA + "'," + Xids.BENCH_FORMAT;
            pgGid = gid;
            pgIns.setLong(1, id);
            pgIns.setString(2, v);
            pgIns.executeUpdate(); // BEGIN; INSERT
            mariaXid = xid;
            mariaStartIns.setString(1, g);
            mariaStartIns.setString(2, Databases.MARIA);
            mariaStartIns.setLong(3, id);
            mariaStartIns.setString(4, v);
            mariaStartIns.execute(); // XA START; INSERT
            side.both(() -> pgS.execute("PREPARE TRANSACTION " + gid), () -> mariaS.execute("XA END " + xid + "; XA PREPARE " + xid));
            side.both(() -> {
                pg.setAutoCommit(true); // no round trip: the session is idle after PREPARE
                try {
                    pgS.execute("COMMIT PREPARED " + gid);
                } finally {
                    pg.setAutoCommit(false);
                }
            }, () -> mariaS.execute("XA COMMIT " + xid));
            pgGid = mariaXid = null;
        }

        /**
         * Rolls back whatever of the failed transaction is still there
         * (active or prepared): no decision was taken, so abort is the
         * outcome, as the databases' own 2PC gives with no coordinator.
         */
        @Override
        public void recover() throws Exception {
            boolean ok = true;
            try {
                pg.rollback();
                pg.setAutoCommit(true);
                if (pgGid != null) {
                    try {
                        pgS.execute("ROLLBACK PREPARED " + pgGid);
                    } catch (java.sql.SQLException e) {
                        ok &= "42704".equals(e.getSQLState()); // not prepared: nothing to undo
                    }
                }
                pg.setAutoCommit(false);
            } catch (Exception e) {
                ok = false;
            }
            if (mariaXid != null) {
                try {
                    mariaS.execute("XA END " + mariaXid);
                } catch (Exception e) {
                    // not active: ended, prepared or never started
                }
                try {
                    mariaS.execute("XA ROLLBACK " + mariaXid);
                } catch (java.sql.SQLException e) {
                    ok &= e.getErrorCode() == 1397; // XAER_NOTA: not there
                }
            }
            pgGid = mariaXid = null;
            if (!ok || !pg.isValid(2) || !maria.isValid(2)) {
                connect();
            }
        }

        @Override
        public void close() {
            Util.closeQuietly(pg, maria);
        }
    }
}
