package io.github.tandemtx.examples.spring;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ThreadLocalRandom;
import javax.sql.DataSource;
import org.springframework.beans.factory.annotation.Qualifier;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.stereotype.Component;

/**
 * The example's tables and its run: accounts and a journal on each database,
 * transfers from several threads (some failing on purpose after writing both
 * databases), then the invariants: the total is unchanged, every committed
 * transfer is journaled on both sides, and no transfer that failed left
 * anything on either.
 */
@Component
public class Bank {
    static final String ACCOUNTS = "tandem_spring_accounts";
    static final String JOURNAL = "tandem_spring_journal";
    static final int ACCOUNT_COUNT = 10;
    static final long INITIAL_BALANCE = 10_000;

    /** What a run did, and the invariants it broke (none, or the example is wrong). */
    public record Report(int committed, int failedOnPurpose, int insufficient, List<String> errors, List<String> violations) {
        public boolean ok() {
            return errors.isEmpty() && violations.isEmpty();
        }

        @Override
        public String toString() {
            return String.format("transfers: %d committed, %d failed on purpose (rolled back), %d refused for insufficient funds, %d errors%s%s",
                    committed, failedOnPurpose, insufficient, errors.size(), errors.isEmpty() ? "" : " " + errors,
                    violations.isEmpty() ? "; invariants hold" : "; INVARIANTS BROKEN: " + violations);
        }
    }

    private final JdbcTemplate pg;
    private final JdbcTemplate maria;
    private final TransferService transfers;

    public Bank(@Qualifier("pg") DataSource pg, @Qualifier("maria") DataSource maria, TransferService transfers) {
        this.pg = new JdbcTemplate(pg);
        this.maria = new JdbcTemplate(maria);
        this.transfers = transfers;
    }

    /** Recreates the example's tables: ACCOUNT_COUNT accounts of INITIAL_BALANCE on each database. Outside any transaction. */
    public void setup() {
        for (JdbcTemplate db : List.of(pg, maria)) {
            db.execute("DROP TABLE IF EXISTS " + ACCOUNTS);
            db.execute("DROP TABLE IF EXISTS " + JOURNAL);
            db.execute("CREATE TABLE " + ACCOUNTS + " (id int PRIMARY KEY, balance bigint NOT NULL, CHECK (balance >= 0))");
            db.execute("CREATE TABLE " + JOURNAL + " (ref varchar(36) PRIMARY KEY, amount bigint NOT NULL)");
            for (int id = 1; id <= ACCOUNT_COUNT; id++) {
                db.update("INSERT INTO " + ACCOUNTS + " (id, balance) VALUES (?, ?)", id, INITIAL_BALANCE);
            }
        }
    }

    /**
     * Sets up, runs n transfers on the given number of threads (every fifth
     * fails on purpose; the amounts, at most 50, never overdraw an account
     * within ACCOUNT_COUNT × 200 transfers), then one that overdraws and must
     * be refused, and checks.
     */
    public Report run(int n, int threads) throws InterruptedException {
        setup();
        Set<String> committed = ConcurrentSet.create(), failed = ConcurrentSet.create();
        List<String> errors = java.util.Collections.synchronizedList(new ArrayList<>());
        int[] insufficient = new int[1];
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        List<Future<?>> fs = new ArrayList<>();
        for (int i = 0; i <= n; i++) {
            boolean failAtEnd = i % 5 == 4;
            int from = i % ACCOUNT_COUNT + 1;
            long amount = i == n ? 2 * INITIAL_BALANCE : ThreadLocalRandom.current().nextLong(1, 51);
            if (i == n) {
                // The overdraft, once the others are done.
                for (Future<?> f : fs) {
                    try {
                        f.get();
                    } catch (java.util.concurrent.ExecutionException e) {
                        errors.add(String.valueOf(e.getCause()));
                    }
                }
                fs.clear();
            }
            fs.add(pool.submit(() -> {
                ThreadLocalRandom r = ThreadLocalRandom.current();
                String ref = UUID.randomUUID().toString();
                try {
                    transfers.transfer(ref, from, r.nextInt(1, ACCOUNT_COUNT + 1), amount, failAtEnd);
                    committed.add(ref);
                } catch (TransferService.FailedOnPurpose e) {
                    failed.add(ref);
                } catch (TransferService.InsufficientFunds e) {
                    synchronized (insufficient) {
                        insufficient[0]++;
                    }
                } catch (RuntimeException e) {
                    errors.add(ref + ": " + e);
                }
            }));
        }
        for (Future<?> f : fs) {
            try {
                f.get();
            } catch (java.util.concurrent.ExecutionException e) {
                errors.add(String.valueOf(e.getCause()));
            }
        }
        pool.shutdown();
        return new Report(committed.size(), failed.size(), insufficient[0], errors, check(committed, failed));
    }

    /** The invariants, read outside any transaction once every transfer has returned. */
    public List<String> check(Set<String> committed, Set<String> failed) {
        List<String> v = new ArrayList<>();
        long total = sum(pg) + sum(maria), want = 2 * ACCOUNT_COUNT * INITIAL_BALANCE;
        if (total != want) {
            v.add("total balance " + total + ", want " + want);
        }
        Set<String> pgRefs = new HashSet<>(pg.queryForList("SELECT ref FROM " + JOURNAL, String.class));
        Set<String> mariaRefs = new HashSet<>(maria.queryForList("SELECT ref FROM " + JOURNAL, String.class));
        if (!pgRefs.equals(mariaRefs)) {
            Set<String> onlyOne = new HashSet<>(pgRefs);
            onlyOne.addAll(mariaRefs);
            onlyOne.removeIf(r -> pgRefs.contains(r) && mariaRefs.contains(r));
            v.add(onlyOne.size() + " transfers journaled on one database only, e.g. " + onlyOne.iterator().next());
        }
        if (!pgRefs.containsAll(committed)) {
            v.add("committed transfers missing from the journal");
        }
        for (String f : failed) {
            if (pgRefs.contains(f) || mariaRefs.contains(f)) {
                v.add("transfer " + f + " failed but left its journal row");
                break;
            }
        }
        return v;
    }

    private static long sum(JdbcTemplate db) {
        Long s = db.queryForObject("SELECT coalesce(sum(balance), 0) FROM " + ACCOUNTS, Long.class);
        return s == null ? 0 : s;
    }

    private static final class ConcurrentSet {
        static Set<String> create() {
            return java.util.concurrent.ConcurrentHashMap.newKeySet();
        }
    }
}
