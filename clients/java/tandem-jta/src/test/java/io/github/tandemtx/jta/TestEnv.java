package io.github.tandemtx.jta;

import java.io.File;
import java.io.IOException;
import java.net.ServerSocket;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.mariadb.jdbc.MariaDbDataSource;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * The real databases (scripts/db env: TANDEM_PG_DSN, TANDEM_MYSQL_DSN) and
 * the tandem binary (TANDEM_BIN, or built here with the failpoints tag).
 */
final class TestEnv {
    static final String PG_URL;
    static final String PG_USER;
    static final String PG_PASSWORD;
    static final String MY_URL;
    /** MariaDB's host:port. */
    static final String MY_HOST_PORT;
    private static final String MY_DB;
    static final String MY_USER;
    static final String MY_PASSWORD;

    static {
        String pg = System.getenv("TANDEM_PG_DSN");
        String my = System.getenv("TANDEM_MYSQL_DSN");
        if (pg == null || pg.isEmpty() || my == null || my.isEmpty()) {
            throw new IllegalStateException("the Java tests need the real databases: TANDEM_PG_DSN and TANDEM_MYSQL_DSN are unset;"
                    + " run eval \"$(scripts/db env)\" (scripts/test does)");
        }
        URI u = URI.create(pg);
        String[] ui = u.getUserInfo().split(":", 2);
        PG_USER = ui[0];
        PG_PASSWORD = ui.length > 1 ? ui[1] : "";
        PG_URL = "jdbc:postgresql://" + u.getHost() + ":" + (u.getPort() > 0 ? u.getPort() : 5432) + u.getPath();
        Matcher m = Pattern.compile("^([^:@]*)(?::([^@]*))?@tcp\\(([^)]*)\\)/([^?]*)").matcher(my);
        if (!m.find()) {
            throw new IllegalStateException("TANDEM_MYSQL_DSN is not user:password@tcp(host:port)/db: " + my.replaceAll(":[^@]*@", ":***@"));
        }
        MY_USER = m.group(1);
        MY_PASSWORD = m.group(2) == null ? "" : m.group(2);
        // allowMultiQueries: a prepare is XA END and XA PREPARE in one round
        // trip (the example's test runs without it, statement by statement).
        MY_URL = "jdbc:mariadb://" + m.group(3) + "/" + m.group(4) + "?allowMultiQueries=true";
        MY_HOST_PORT = m.group(3);
        MY_DB = m.group(4);
    }

    private TestEnv() {
    }

    static PGSimpleDataSource pgSource() {
        PGSimpleDataSource ds = new PGSimpleDataSource();
        ds.setURL(PG_URL);
        ds.setUser(PG_USER);
        ds.setPassword(PG_PASSWORD);
        return ds;
    }

    static MariaDbDataSource mariaSource() {
        try {
            MariaDbDataSource ds = new MariaDbDataSource(MY_URL);
            ds.setUser(MY_USER);
            ds.setPassword(MY_PASSWORD);
            return ds;
        } catch (SQLException e) {
            throw new IllegalStateException(e);
        }
    }

    /** MariaDB reached through 127.0.0.1:port (a TcpProxy). */
    static MariaDbDataSource mariaSourceVia(int port) {
        try {
            MariaDbDataSource ds = new MariaDbDataSource("jdbc:mariadb://127.0.0.1:" + port + "/" + MY_DB + "?allowMultiQueries=true");
            ds.setUser(MY_USER);
            ds.setPassword(MY_PASSWORD);
            return ds;
        } catch (SQLException e) {
            throw new IllegalStateException(e);
        }
    }

    static Connection pg() throws SQLException {
        return DriverManager.getConnection(PG_URL, PG_USER, PG_PASSWORD);
    }

    static Connection maria() throws SQLException {
        return DriverManager.getConnection(MY_URL, MY_USER, MY_PASSWORD);
    }

    /** Creates the tests' tables if absent (both databases). */
    static void createTables() throws SQLException {
        try (Connection c = pg(); Statement st = c.createStatement()) {
            st.execute("CREATE TABLE IF NOT EXISTS jta_rows (id text PRIMARY KEY, v int NOT NULL)");
            st.execute("CREATE TABLE IF NOT EXISTS jta_parent (id int PRIMARY KEY)");
            st.execute("CREATE TABLE IF NOT EXISTS jta_child (id text PRIMARY KEY,"
                    + " parent int REFERENCES jta_parent (id) DEFERRABLE INITIALLY DEFERRED)");
        }
        try (Connection c = maria(); Statement st = c.createStatement()) {
            st.execute("CREATE TABLE IF NOT EXISTS jta_rows (id varchar(64) PRIMARY KEY, v int NOT NULL) ENGINE=InnoDB");
        }
    }

    static boolean pgHas(String id) throws SQLException {
        return has(pg(), id);
    }

    static boolean mariaHas(String id) throws SQLException {
        return has(maria(), id);
    }

    private static boolean has(Connection conn, String id) throws SQLException {
        try (Connection c = conn; PreparedStatement ps = c.prepareStatement("SELECT count(*) FROM jta_rows WHERE id = ?")) {
            ps.setString(1, id);
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                return rs.getInt(1) == 1;
            }
        }
    }

    /** The prepared branches of gtrid: PostgreSQL GIDs and MariaDB "gtrid,bqual,formatID" rows. */
    static List<String> prepared(String gtrid) throws SQLException {
        List<String> out = new ArrayList<>();
        try (Connection c = pg(); PreparedStatement ps = c.prepareStatement("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE ?")) {
            ps.setString(1, "%" + gtrid + "%");
            try (ResultSet rs = ps.executeQuery()) {
                while (rs.next()) {
                    out.add("pg " + rs.getString(1));
                }
            }
        }
        try (Connection c = maria(); Statement st = c.createStatement(); ResultSet rs = st.executeQuery("XA RECOVER")) {
            while (rs.next()) {
                int gl = rs.getInt("gtrid_length");
                String data = rs.getString("data");
                if (data.startsWith(gtrid)) {
                    out.add("maria " + data.substring(0, gl) + "," + data.substring(gl) + "," + rs.getLong("formatID"));
                }
            }
        }
        return out;
    }

    /** Waits up to timeoutMs for cond; false if it never held. */
    static boolean eventually(long timeoutMs, Check cond) throws Exception {
        long end = System.currentTimeMillis() + timeoutMs;
        while (true) {
            if (cond.ok()) {
                return true;
            }
            if (System.currentTimeMillis() > end) {
                return false;
            }
            Thread.sleep(100);
        }
    }

    interface Check {
        boolean ok() throws Exception;
    }

    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    private static String tandemBin;

    /** The tandem binary, with failpoints compiled in. */
    static synchronized String tandemBin() throws IOException, InterruptedException {
        if (tandemBin != null) {
            return tandemBin;
        }
        String p = System.getProperty("tandem.bin");
        if (p == null || p.isEmpty() || p.startsWith("${")) {
            p = System.getenv("TANDEM_BIN");
        }
        if (p != null && !p.isEmpty()) {
            if (!new File(p).canExecute()) {
                throw new IllegalStateException("TANDEM_BIN=" + p + " is not an executable file; build it with"
                        + " go build -tags failpoints -o " + p + " ./cmd/tandem");
            }
            tandemBin = p;
            return p;
        }
        // Built from this checkout: clients/java/tandem-jta is three levels down.
        Path root = Path.of("").toAbsolutePath().getParent().getParent().getParent();
        Path out = Path.of("target", "tandem-bin", "tandem").toAbsolutePath();
        Files.createDirectories(out.getParent());
        Process b = new ProcessBuilder("go", "build", "-tags", "failpoints", "-o", out.toString(), "./cmd/tandem")
                .directory(root.toFile()).inheritIO().start();
        if (b.waitFor() != 0) {
            throw new IllegalStateException("go build ./cmd/tandem failed in " + root + "; set TANDEM_BIN to a tandem binary built with -tags failpoints");
        }
        tandemBin = out.toString();
        return tandemBin;
    }
}
