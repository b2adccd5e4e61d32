package io.github.tandemtx.examples.transfer;

import io.github.tandemtx.jta.OutcomeUnknownException;
import io.github.tandemtx.jta.TandemConfig;
import io.github.tandemtx.jta.TandemDataSource;
import io.github.tandemtx.jta.TandemTransaction;
import io.github.tandemtx.jta.TandemTransactionManager;
import jakarta.transaction.RollbackException;
import java.io.PrintStream;
import java.net.URI;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.mariadb.jdbc.MariaDbDataSource;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * Moves money between accounts kept in two databases — half in PostgreSQL,
 * half in MariaDB — with one JTA transaction per transfer through Tandem, and
 * proves that none was lost (the Java twin of the Go examples/transfer).
 *
 * <p>Each transfer debits an account on one database, credits one on the
 * other, and writes the transfer's gtrid into a journal table on both, in
 * plain JDBC between {@code ut.begin()} and {@code ut.commit()}. At the end it
 * checks:
 *
 * <ul>
 *   <li>the total of all balances is unchanged (atomicity);
 *   <li>the journals on both sides hold the same gtrids, and every transfer
 *       whose commit returned is in both (nothing acknowledged was lost);
 *   <li>no branch of this run is left prepared on either database.
 * </ul>
 *
 * <p>It exits non-zero when a check fails. Usage:
 * {@code java -cp ... io.github.tandemtx.examples.transfer.Transfer --coordinator 127.0.0.1:7070 [--workers 8] [--seconds 10]}
 * with TANDEM_PG_DSN and TANDEM_MYSQL_DSN set as for the Go tools (scripts/db env).
 */
public final class Transfer {
    /** Marks the tables this demo created: a reset drops only tables that carry it. */
    static final String DEMO_MARK = "created by the Java transfer example of tandem";

    /** What to run. */
    public static final class Config {
        public String coordinator;
        public int workers = 8;
        public Duration duration = Duration.ofSeconds(10);
        public int transfers; // stop after this many committed (0: run for duration)
        public int accounts = 1000;
        public long initialBalance = 1000;
        public String prefix = "tandem_jdemo_";
        public String pgName = "pg";
        public String mariaName = "maria";
        public String pgDsn = System.getenv("TANDEM_PG_DSN");
        public String mysqlDsn = System.getenv("TANDEM_MYSQL_DSN");
    }

    /** What a run did and found. */
    public static final class Report {
        public final AtomicLong committed = new AtomicLong();
        public final AtomicLong aborted = new AtomicLong();
        public final AtomicLong unknown = new AtomicLong();
        public final AtomicLong insufficient = new AtomicLong();
        public long total;
        public long want;
        public int journalPg;
        public int journalMaria;
        public int dangling;
        public final List<String> violations = new ArrayList<>();
        public Duration elapsed = Duration.ZERO;

        public void print(PrintStream out) {
            double secs = Math.max(elapsed.toMillis(), 1) / 1000.0;
            out.printf("transfer (Java, JTA): %d committed (%.0f/s), %d rolled back, %d outcome unknown, %d refused for funds%n",
                    committed.get(), committed.get() / secs, aborted.get(), unknown.get(), insufficient.get());
            out.printf("  total %d (want %d), journals: postgres %d, mariadb %d, prepared left: %d%n", total, want, journalPg, journalMaria, dangling);
            if (violations.isEmpty()) {
                out.println("  checks: OK (total unchanged, journals match, every acknowledged transfer present, nothing left prepared)");
            } else {
                for (String v : violations) {
                    out.println("  VIOLATION: " + v);
                }
            }
        }
    }

    private final Config cfg;
    private final String accounts;
    private final String journal;
    private final PGSimpleDataSource pgSource;
    private final MariaDbDataSource mariaSource;

    Transfer(Config cfg) throws SQLException {
        this.cfg = cfg;
        if (!cfg.prefix.matches("[a-z_][a-z0-9_]*")) {
            throw new IllegalArgumentException("prefix " + cfg.prefix + ": want [a-z_][a-z0-9_]*");
        }
        this.accounts = cfg.prefix + "accounts";
        this.journal = cfg.prefix + "transfer_journal";
        if (cfg.pgDsn == null || cfg.mysqlDsn == null) {
            throw new IllegalArgumentException("TANDEM_PG_DSN and TANDEM_MYSQL_DSN must be set (eval \"$(scripts/db env)\")");
        }
        URI u = URI.create(cfg.pgDsn);
        String[] ui = u.getUserInfo().split(":", 2);
        pgSource = new PGSimpleDataSource();
        pgSource.setURL("jdbc:postgresql://" + u.getHost() + ":" + (u.getPort() > 0 ? u.getPort() : 5432) + u.getPath());
        pgSource.setUser(ui[0]);
        pgSource.setPassword(ui.length > 1 ? ui[1] : "");
        Matcher m = Pattern.compile("^([^:@]*)(?::([^@]*))?@tcp\\(([^)]*)\\)/([^?]*)").matcher(cfg.mysqlDsn);
        if (!m.find()) {
            throw new IllegalArgumentException("TANDEM_MYSQL_DSN is not user:password@tcp(host:port)/db");
        }
        mariaSource = new MariaDbDataSource("jdbc:mariadb://" + m.group(3) + "/" + m.group(4));
        mariaSource.setUser(m.group(1));
        mariaSource.setPassword(m.group(2) == null ? "" : m.group(2));
    }

    /** Sets up, runs the workers, and checks the invariants; the report's violations say what failed. */
    public static Report run(Config cfg, PrintStream progress) throws Exception {
        return new Transfer(cfg).run(progress);
    }

    Report run(PrintStream progress) throws Exception {
        setup();
        Report rep = new Report();
        rep.want = 2L * cfg.accounts * cfg.initialBalance;
        Set<String> acked = ConcurrentHashMap.newKeySet();
        Set<String> begun = ConcurrentHashMap.newKeySet();
        try (TandemTransactionManager tm = TandemTransactionManager.create(
                TandemConfig.coordinator(cfg.coordinator).withDecisionTimeout(Duration.ofSeconds(10)))) {
            TandemDataSource pg = TandemDataSource.postgres(tm, cfg.pgName, pgSource).setMaxPoolSize(cfg.workers);
            TandemDataSource maria = TandemDataSource.mariadb(tm, cfg.mariaName, mariaSource).setMaxPoolSize(cfg.workers);
            tm.verify();
            long start = System.nanoTime();
            long end = start + cfg.duration.toNanos();
            AtomicLong budget = new AtomicLong(cfg.transfers > 0 ? cfg.transfers : Long.MAX_VALUE);
            List<Thread> threads = new ArrayList<>();
            List<Throwable> failures = new ArrayList<>();
            for (int w = 0; w < cfg.workers; w++) {
                Thread t = new Thread(() -> {
                    try {
                        worker(tm, pg, maria, rep, acked, begun, budget, cfg.transfers > 0 ? Long.MAX_VALUE : end);
                    } catch (Throwable e) {
                        synchronized (failures) {
                            failures.add(e);
                        }
                    }
                }, "transfer-" + w);
                threads.add(t);
                t.start();
            }
            for (Thread t : threads) {
                t.join();
            }
            rep.elapsed = Duration.ofNanos(System.nanoTime() - start);
            pg.close();
            maria.close();
            if (!failures.isEmpty()) {
                throw new IllegalStateException("a worker failed: " + failures.get(0), failures.get(0));
            }
        }
        check(rep, acked, begun);
        if (progress != null) {
            rep.print(progress);
        }
        return rep;
    }

    private void worker(TandemTransactionManager tm, TandemDataSource pg, TandemDataSource maria, Report rep,
            Set<String> acked, Set<String> begun, AtomicLong budget, long end) throws Exception {
        ThreadLocalRandom rnd = ThreadLocalRandom.current();
        while (System.nanoTime() < end && budget.getAndDecrement() > 0) {
            int a = 1 + rnd.nextInt(cfg.accounts);
            int b = 1 + rnd.nextInt(cfg.accounts);
            long amount = 1 + rnd.nextInt(100);
            boolean fromPg = rnd.nextBoolean();
            tm.begin();
            String g = ((TandemTransaction) tm.getTransaction()).gtrid();
            begun.add(g);
            try {
                boolean ok;
                try (Connection p = pg.getConnection(); Connection m = maria.getConnection()) {
                    ok = fromPg ? move(p, m, a, b, amount, g) : move(m, p, a, b, amount, g);
                }
                if (!ok) {
                    tm.rollback();
                    rep.insufficient.incrementAndGet();
                    budget.incrementAndGet();
                    continue;
                }
                tm.commit();
                acked.add(g);
                rep.committed.incrementAndGet();
            } catch (RollbackException e) {
                rep.aborted.incrementAndGet();
                budget.incrementAndGet();
            } catch (OutcomeUnknownException e) {
                rep.unknown.incrementAndGet();
            } catch (SQLException e) {
                // A statement failed (a deadlock between workers, say): roll back and go on.
                if (tm.getTransaction() != null) {
                    tm.rollback();
                }
                rep.aborted.incrementAndGet();
                budget.incrementAndGet();
            }
        }
    }

    /** Debits a on from, credits b on to, journals g on both. False when a has too little money. */
    private boolean move(Connection from, Connection to, int a, int b, long amount, String g) throws SQLException {
        try (PreparedStatement ps = from.prepareStatement("UPDATE " + accounts + " SET balance = balance - ? WHERE id = ? AND balance - ? >= 0")) {
            ps.setLong(1, amount);
            ps.setInt(2, a);
            ps.setLong(3, amount);
            if (ps.executeUpdate() != 1) {
                return false;
            }
        }
        try (PreparedStatement ps = to.prepareStatement("UPDATE " + accounts + " SET balance = balance + ? WHERE id = ?")) {
            ps.setLong(1, amount);
            ps.setInt(2, b);
            if (ps.executeUpdate() != 1) {
                throw new SQLException("account " + b + " does not exist");
            }
        }
        for (Connection c : new Connection[] {from, to}) {
            try (PreparedStatement ps = c.prepareStatement("INSERT INTO " + journal + " (gtrid, amount) VALUES (?, ?)")) {
                ps.setString(1, g);
                ps.setLong(2, amount);
                ps.executeUpdate();
            }
        }
        return true;
    }

    /** Refuses to drop a table of the demo's names that this demo did not create. */
    private void setup() throws SQLException {
        try (Connection c = pgSource.getConnection(); Statement st = c.createStatement()) {
            c.setAutoCommit(false); // the tables and their mark appear together, or not at all
            for (String t : List.of(accounts, journal)) {
                try (PreparedStatement ps = c.prepareStatement(
                        "SELECT to_regclass(?) IS NOT NULL, COALESCE(obj_description(to_regclass(?), 'pg_class'), '')")) {
                    ps.setString(1, t);
                    ps.setString(2, t);
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        if (rs.getBoolean(1) && !DEMO_MARK.equals(rs.getString(2))) {
                            throw new SQLException("postgres: table " + t + " exists and was not created by this demo: not dropping it; choose another prefix");
                        }
                    }
                }
            }
            for (String s : List.of("DROP TABLE IF EXISTS " + accounts, "DROP TABLE IF EXISTS " + journal,
                    "CREATE TABLE " + accounts + " (id int PRIMARY KEY, balance bigint NOT NULL CHECK (balance >= 0))",
                    "CREATE TABLE " + journal + " (gtrid char(32) PRIMARY KEY, amount bigint NOT NULL)",
                    "COMMENT ON TABLE " + accounts + " IS '" + DEMO_MARK + "'",
                    "COMMENT ON TABLE " + journal + " IS '" + DEMO_MARK + "'",
                    "INSERT INTO " + accounts + " SELECT g, " + cfg.initialBalance + " FROM generate_series(1, " + cfg.accounts + ") g")) {
                st.execute(s);
            }
            c.commit();
        }
        try (Connection c = mariaSource.getConnection(); Statement st = c.createStatement()) {
            for (String t : List.of(accounts, journal)) {
                try (PreparedStatement ps = c.prepareStatement(
                        "SELECT table_comment FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?")) {
                    ps.setString(1, t);
                    try (ResultSet rs = ps.executeQuery()) {
                        if (rs.next() && !DEMO_MARK.equals(rs.getString(1))) {
                            throw new SQLException("mariadb: table " + t + " exists and was not created by this demo: not dropping it; choose another prefix");
                        }
                    }
                }
            }
            for (String s : List.of("DROP TABLE IF EXISTS " + accounts, "DROP TABLE IF EXISTS " + journal,
                    "CREATE TABLE " + accounts + " (id int PRIMARY KEY, balance bigint NOT NULL, CHECK (balance >= 0)) ENGINE=InnoDB COMMENT='" + DEMO_MARK + "'",
                    "CREATE TABLE " + journal + " (gtrid char(32) PRIMARY KEY, amount bigint NOT NULL) ENGINE=InnoDB COMMENT='" + DEMO_MARK + "'",
                    "INSERT INTO " + accounts + " (id, balance) SELECT seq, " + cfg.initialBalance + " FROM seq_1_to_" + cfg.accounts)) {
                st.execute(s);
            }
        }
    }

    /** Checks the invariants; prepared branches of transfers still settling get 30 s. */
    private void check(Report rep, Set<String> acked, Set<String> begun) throws Exception {
        long deadline = System.currentTimeMillis() + 30_000;
        while (true) {
            rep.dangling = dangling(begun);
            if (rep.dangling == 0 || System.currentTimeMillis() > deadline) {
                break;
            }
            Thread.sleep(200);
        }
        long a;
        long b;
        Set<String> pgIds;
        Set<String> myIds;
        try (Connection c = pgSource.getConnection()) {
            a = sum(c);
            pgIds = ids(c);
        }
        try (Connection c = mariaSource.getConnection()) {
            b = sum(c);
            myIds = ids(c);
        }
        rep.total = a + b;
        rep.journalPg = pgIds.size();
        rep.journalMaria = myIds.size();
        if (rep.total != rep.want) {
            rep.violations.add("total balance is " + rep.total + ", want " + rep.want);
        }
        if (rep.dangling != 0) {
            rep.violations.add(rep.dangling + " prepared branches left on the databases");
        }
        List<String> onlyOne = new ArrayList<>();
        for (String g : pgIds) {
            if (!myIds.contains(g)) {
                onlyOne.add(g + " (postgres only)");
            }
        }
        for (String g : myIds) {
            if (!pgIds.contains(g)) {
                onlyOne.add(g + " (mariadb only)");
            }
        }
        if (!onlyOne.isEmpty()) {
            rep.violations.add(onlyOne.size() + " transfers committed on one side only, e.g. " + onlyOne.get(0));
        }
        long missing = acked.stream().filter(g -> !pgIds.contains(g) || !myIds.contains(g)).count();
        if (missing > 0) {
            rep.violations.add(missing + " transfers acknowledged as committed are missing");
        }
    }

    private long sum(Connection c) throws SQLException {
        try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery("SELECT COALESCE(SUM(balance), 0) FROM " + accounts)) {
            rs.next();
            return rs.getLong(1);
        }
    }

    private Set<String> ids(Connection c) throws SQLException {
        Set<String> out = new HashSet<>();
        try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery("SELECT gtrid FROM " + journal)) {
            while (rs.next()) {
                out.add(rs.getString(1).trim());
            }
        }
        return out;
    }

    /** Prepared branches of this run's gtrids, by their Tandem names, on both databases. */
    private int dangling(Set<String> begun) throws SQLException {
        int n = 0;
        try (Connection c = pgSource.getConnection(); Statement st = c.createStatement();
                ResultSet rs = st.executeQuery("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'tandem:%'")) {
            while (rs.next()) {
                String[] p = rs.getString(1).split(":");
                if (p.length == 3 && p[2].equals(cfg.pgName) && begun.contains(p[1])) {
                    n++;
                }
            }
        }
        try (Connection c = mariaSource.getConnection(); Statement st = c.createStatement(); ResultSet rs = st.executeQuery("XA RECOVER")) {
            while (rs.next()) {
                int gl = rs.getInt("gtrid_length");
                String data = rs.getString("data");
                if (rs.getLong("formatID") == 0x54414E44 && gl == 32 && data.substring(gl).equals(cfg.mariaName) && begun.contains(data.substring(0, gl))) {
                    n++;
                }
            }
        }
        return n;
    }

    public static void main(String[] args) throws Exception {
        Config cfg = new Config();
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            String v = i + 1 < args.length ? args[i + 1] : null;
            switch (a) {
                case "--coordinator" -> cfg.coordinator = v;
                case "--workers" -> cfg.workers = Integer.parseInt(v);
                case "--seconds" -> cfg.duration = Duration.ofSeconds(Long.parseLong(v));
                case "--transfers" -> cfg.transfers = Integer.parseInt(v);
                case "--accounts" -> cfg.accounts = Integer.parseInt(v);
                case "--prefix" -> cfg.prefix = v;
                case "--rm-pg" -> cfg.pgName = v;
                case "--rm-maria" -> cfg.mariaName = v;
                case "-h", "--help" -> {
                    System.out.println("Usage: Transfer --coordinator HOST:PORT [--workers N] [--seconds S | --transfers N] [--accounts N]"
                            + " [--prefix tandem_jdemo_] [--rm-pg pg] [--rm-maria maria]\nTANDEM_PG_DSN and TANDEM_MYSQL_DSN name the databases.");
                    return;
                }
                default -> {
                    System.err.println("transfer: unknown argument " + a + " (see --help)");
                    System.exit(2);
                }
            }
            i++;
        }
        if (cfg.coordinator == null) {
            System.err.println("transfer: --coordinator HOST:PORT is required (a running `tandem serve` with --rm pg=... --rm maria=...)");
            System.exit(2);
        }
        Report rep = run(cfg, System.out);
        if (!rep.violations.isEmpty()) {
            System.exit(1);
        }
    }
}
