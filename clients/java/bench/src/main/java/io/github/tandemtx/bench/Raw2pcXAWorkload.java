package io.github.tandemtx.bench;

import java.sql.Connection;
import java.sql.PreparedStatement;
import javax.sql.XAConnection;
import javax.transaction.xa.XAResource;

/**
 * raw2pc-xa: the databases' own two-phase commit driven by hand through the JDBC
 * drivers' XAResources (pgjdbc's PGXAConnection: PREPARE TRANSACTION /
 * COMMIT PREPARED; MariaDB Connector/J's: XA START … XA COMMIT), with no
 * coordinator and no decision log: insert on each, end and prepare both in
 * parallel, commit both in parallel, each on the connection that prepared it.
 * A crash between the commits breaks atomicity. It is the floor of any XA
 * transaction manager over these drivers: what one costs with no log.
 *
 * <p>Round trips: PostgreSQL 3 (BEGIN rides with the insert, PREPARE, COMMIT
 * PREPARED), as in Go; MariaDB 5 (XA START, insert, XA END, XA PREPARE, XA
 * COMMIT: Connector/J sends each XAResource call on its own, where the Go
 * benchmark's raw2pc sends XA START with the insert and XA END with XA
 * PREPARE, 4, and so does {@link Raw2pcWorkload}).
 */
final class Raw2pcXAWorkload implements Workload {
    private final Databases db;

    Raw2pcXAWorkload(Databases db) {
        this.db = db;
    }

    @Override
    public String name() {
        return "raw2pc-xa";
    }

    @Override
    public String summary() {
        return "raw2pc through the JDBC drivers' XAResources instead of SQL: what a TM built on XAResource pays at least";
    }

    @Override
    public Worker open(int t, Side side) throws Exception {
        W w = new W(side);
        w.connect();
        return w;
    }

    private final class W implements Worker {
        private final Side side;
        private XAConnection pgX, mariaX;
        private Connection pg, maria;
        private XAResource pgXA, mariaXA;
        private PreparedStatement pgIns, mariaIns;
        private Xids pgXid, mariaXid; // the current branches, for recover

        W(Side side) {
            this.side = side;
        }

        void connect() throws Exception {
            close();
            pgX = db.pgXA();
            pg = pgX.getConnection();
            pgXA = pgX.getXAResource();
            pgIns = pg.prepareStatement(INSERT);
            mariaX = db.mariaXA();
            maria = mariaX.getConnection();
            mariaXA = mariaX.getXAResource();
            mariaIns = maria.prepareStatement(INSERT);
        }

        @Override
        public void txn(long id) throws Exception {
            String v = Workload.value(id);
            byte[] g = Xids.newGtrid();
            Xids xp = Xids.branch(g, Databases.PG), xm = Xids.branch(g, Databases.MARIA);
            pgXid = xp;
            mariaXid = xm;
            pgXA.start(xp, XAResource.TMNOFLAGS);
            pgIns.setLong(1, id);
            pgIns.setString(2, v);
            pgIns.executeUpdate();
            mariaXA.start(xm, XAResource.TMNOFLAGS);
            mariaIns.setLong(1, id);
            mariaIns.setString(2, v);
            mariaIns.executeUpdate();
            side.both(() -> {
                pgXA.end(xp, XAResource.TMSUCCESS);
                pgXA.prepare(xp);
            }, () -> {
                mariaXA.end(xm, XAResource.TMSUCCESS);
                mariaXA.prepare(xm);
            });
            side.both(() -> pgXA.commit(xp, false), () -> mariaXA.commit(xm, false));
            pgXid = mariaXid = null;
        }

        /**
         * Rolls back whatever of the failed transaction's branches is still
         * there (active or prepared); no decision was taken, so abort is the
         * outcome, as the databases' own 2PC gives with no coordinator.
         */
        @Override
        public void recover() throws Exception {
            boolean ok = true;
            ok &= abort(pgXA, pgXid);
            ok &= abort(mariaXA, mariaXid);
            pgXid = mariaXid = null;
            if (!ok || !pg.isValid(2) || !maria.isValid(2)) {
                connect();
            }
        }

        private boolean abort(XAResource xa, Xids x) {
            if (x == null) {
                return true;
            }
            try {
                xa.end(x, XAResource.TMFAIL);
            } catch (Exception e) {
                // not active: it was ended or prepared, or never started
            }
            try {
                xa.rollback(x);
                return true;
            } catch (javax.transaction.xa.XAException e) {
                return e.errorCode == javax.transaction.xa.XAException.XAER_NOTA;
            }
        }

        @Override
        public void close() {
            Util.closeQuietly(pg, maria);
            Util.closeQuietly(pgX, mariaX);
        }
    }
}
