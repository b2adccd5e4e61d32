package io.github.tandemtx.bench;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import javax.sql.XAConnection;
import javax.transaction.xa.XAException;
import javax.transaction.xa.XAResource;
import javax.transaction.xa.Xid;
import org.mariadb.jdbc.MariaDbDataSource;
import org.postgresql.xa.PGXADataSource;

/**
 * The two resource managers of the unit of work, named as in the Go
 * benchmark: "pg" (PostgreSQL) and "maria" (MariaDB). Every connection it
 * opens has a connect timeout and a socket timeout, so that a database that
 * is gone fails a transaction instead of hanging the run.
 */
final class Databases {
    static final String PG = "pg";
    static final String MARIA = "maria";

    final String pgUrl;
    final String mariaUrl;

    Databases(String pgUrl, String mariaUrl) {
        this.pgUrl = Dsn.withDefault(Dsn.withDefault(pgUrl, "connectTimeout", "5"), "socketTimeout", "30");
        this.mariaUrl = Dsn.withDefault(Dsn.withDefault(mariaUrl, "connectTimeout", "5000"), "socketTimeout", "30000");
    }

    /** Thrown when a database cannot be reached or refuses the bench's setup. */
    static final class Unreachable extends Exception {
        Unreachable(String rm, String url, SQLException cause) {
            super("rm " + rm + " (" + Dsn.redact(url) + "): " + cause.getMessage()
                    + " — is the database running and the URL right? (the Go side's environment: eval \"$(scripts/db env)\")", cause);
        }
    }

    Connection pg() throws SQLException {
        return DriverManager.getConnection(pgUrl);
    }

    Connection maria() throws SQLException {
        return DriverManager.getConnection(mariaUrl);
    }

    /** A MariaDB connection that takes several statements in one round trip. */
    Connection mariaMulti() throws SQLException {
        return DriverManager.getConnection(Dsn.withDefault(mariaUrl, "allowMultiQueries", "true"));
    }

    XAConnection pgXA() throws SQLException {
        PGXADataSource ds = new PGXADataSource();
        ds.setURL(pgUrl);
        return ds.getXAConnection();
    }

    XAConnection mariaXA() throws SQLException {
        return new MariaDbDataSource(mariaUrl).getXAConnection();
    }

    /**
     * Checks both databases answer, creates tandem_bench where missing (the
     * Go benchmark's table: id bigint PRIMARY KEY, v varchar(64)), empties
     * it, and rolls back raw2pc branches (GID bench:…, format BENC) that a
     * run which died left prepared. Returns what it rolled back, for the log.
     */
    List<String> setup() throws Unreachable {
        List<String> rolledBack = new ArrayList<>();
        setup(PG, pgUrl, rolledBack);
        setup(MARIA, mariaUrl, rolledBack);
        return rolledBack;
    }

    private void setup(String rm, String url, List<String> rolledBack) throws Unreachable {
        XAConnection xc = null;
        try {
            xc = rm.equals(PG) ? pgXA() : mariaXA();
            Connection c = xc.getConnection();
            Statement s = c.createStatement();
            s.execute("CREATE TABLE IF NOT EXISTS tandem_bench (id bigint PRIMARY KEY, v varchar(64) NOT NULL)");
            s.execute("DELETE FROM tandem_bench");
            if (rm.equals(PG)) {
                // raw2pc's own GIDs (and the Go benchmark's): not in pgjdbc's XID format.
                List<String> gids = new ArrayList<>();
                try (var r = s.executeQuery("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'bench:%' AND database = current_database()")) {
                    while (r.next()) {
                        gids.add(r.getString(1));
                    }
                }
                for (String g : gids) {
                    s.execute("ROLLBACK PREPARED '" + g.replace("'", "''") + "'");
                    rolledBack.add(rm + ":" + g);
                }
            }
            XAResource xa = xc.getXAResource();
            for (Xid x : xa.recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN)) {
                if (x.getFormatId() == Xids.BENCH_FORMAT) {
                    xa.rollback(x);
                    rolledBack.add(rm + ":" + java.util.HexFormat.of().formatHex(x.getGlobalTransactionId()));
                }
            }
        } catch (SQLException e) {
            throw new Unreachable(rm, url, e);
        } catch (XAException e) {
            throw new Unreachable(rm, url, new SQLException("XA recover/rollback of a left-over raw2pc branch: " + e + " (XA error " + e.errorCode + ")", e));
        } finally {
            Util.closeQuietly(xc);
        }
    }

    /**
     * What is left on the databases at a quiet moment: the prepared branches
     * (PostgreSQL: pg_prepared_xacts of this database; MariaDB: XA RECOVER,
     * the whole server) and the rows of tandem_bench on each.
     */
    record Check(List<String> pgPrepared, List<String> mariaPrepared, long pgRows, long mariaRows) {
        /** This check without the branches that were already prepared in {@code before}. */
        Check without(Check before) {
            return new Check(pgPrepared.stream().filter(g -> !before.pgPrepared.contains(g)).toList(),
                    mariaPrepared.stream().filter(g -> !before.mariaPrepared.contains(g)).toList(), pgRows, mariaRows);
        }
    }

    /** Reads the prepared branches and the row counts of both databases. */
    Check check() throws SQLException {
        List<String> pgp = new ArrayList<>(), mp = new ArrayList<>();
        long[] n = new long[2];
        try (Connection c = pg(); Statement s = c.createStatement()) {
            try (var r = s.executeQuery("SELECT gid FROM pg_prepared_xacts WHERE database = current_database() ORDER BY gid")) {
                while (r.next()) {
                    pgp.add(r.getString(1));
                }
            }
            try (var r = s.executeQuery("SELECT count(*) FROM tandem_bench")) {
                r.next();
                n[0] = r.getLong(1);
            }
        }
        try (Connection c = maria(); Statement s = c.createStatement()) {
            // FORMAT='SQL': each XID as X'gtrid',X'bqual',formatID, as XA COMMIT/ROLLBACK take it.
            try (var r = s.executeQuery("XA RECOVER FORMAT='SQL'")) {
                while (r.next()) {
                    mp.add(r.getString("data"));
                }
            }
            try (var r = s.executeQuery("SELECT count(*) FROM tandem_bench")) {
                r.next();
                n[1] = r.getLong(1);
            }
        }
        return new Check(pgp, mp, n[0], n[1]);
    }

    /** Rows in tandem_bench on each database: {pg, maria}. */
    long[] count() throws SQLException {
        long[] n = new long[2];
        try (Connection c = pg(); Statement s = c.createStatement(); var r = s.executeQuery("SELECT count(*) FROM tandem_bench")) {
            r.next();
            n[0] = r.getLong(1);
        }
        try (Connection c = maria(); Statement s = c.createStatement(); var r = s.executeQuery("SELECT count(*) FROM tandem_bench")) {
            r.next();
            n[1] = r.getLong(1);
        }
        return n;
    }
}
