package io.github.tandemtx.bench;

import java.io.PrintStream;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The Java benchmark: the JDBC unit of work of `tandem bench db` (one insert
 * on each of PostgreSQL and MariaDB, each thread its own connections) as sql,
 * raw2pc, tandem, and through Narayana and Atomikos, in one run, interleaved
 * in slices. After each workload's last slice it checks that nothing is left
 * prepared on either database and that both hold the rows of every committed
 * transaction. See {@link Flags#usage}.
 *
 * <p>Exit status: 0 when the run completed and every check passed, 2 for a
 * bad flag, 1 when a database, the coordinator or a transaction manager
 * cannot be reached or started or a worker cannot reconnect, 3 when a check
 * failed (the report says which).
 */
public final class Main {
    Main() {}

    public static void main(String[] args) {
        PrintStream err = System.err;
        Flags f;
        try {
            f = Flags.parse(args);
        } catch (Flags.BadFlag e) {
            err.println("bench: " + e.getMessage());
            err.println("usage: java -jar tandem-bench.jar [flags]; --help lists them");
            System.exit(2);
            return;
        }
        if (f.help) {
            System.out.print(Flags.usage());
            return;
        }
        Result r;
        try {
            r = new Main().run(f, System.out, err);
        } catch (Fatal e) {
            err.println("bench: " + e.getMessage());
            System.exit(1);
            return;
        }
        if (!r.checksPassed()) {
            err.println("bench: a check failed: something was left prepared, or the two databases' rows differ (see the check lines above)");
            System.exit(3);
        }
        // So that a thread a transaction manager leaves running cannot keep the JVM alive.
        System.exit(0);
    }

    /** Ends the run: what failed, and what to do. */
    static final class Fatal extends Exception {
        Fatal(String msg, Throwable cause) {
            super(msg, cause);
        }
    }

    /** One workload's figures over its slices. */
    static final class Stats {
        final Workload wl;
        final Workload.Worker[] workers;
        long txns, errs, elapsedNanos, procCpuNanos, threadCpuNanos;
        long[] lat = new long[1024];
        int nlat;
        String firstError;
        /** The check after the workload's last slice: null before it ran; its line for the report. */
        Boolean checkPassed;
        String checkLine;

        Stats(Workload wl, int threads) {
            this.wl = wl;
            this.workers = new Workload.Worker[threads];
        }

        synchronized void add(long[] l, int n, long txns, long errs, String error) {
            if (nlat + n > lat.length) {
                lat = Arrays.copyOf(lat, Math.max(2 * lat.length, nlat + n));
            }
            System.arraycopy(l, 0, lat, nlat, n);
            nlat += n;
            this.txns += txns;
            this.errs += errs;
            if (firstError == null) {
                firstError = error;
            }
        }

        double tps() {
            return elapsedNanos == 0 ? 0 : txns / (elapsedNanos / 1e9);
        }

        /** Latency quantile q in milliseconds. */
        double quantileMs(double q) {
            if (nlat == 0) {
                return 0;
            }
            long[] s = Arrays.copyOf(lat, nlat);
            Arrays.sort(s);
            return s[Math.min(nlat - 1, (int) Math.ceil(q * nlat) - 1)] / 1e6;
        }
    }

    /**
     * The ids of tandem_bench's rows start at the run's start in nanoseconds
     * since the epoch (as the Go benchmark's do), not at 1: an earlier run
     * may have left branches prepared, whose rows appear whenever they are
     * resolved, after this run's setup emptied the table; from 1, this run
     * would wait for their locks, then fail on their keys.
     */
    private final long firstId = epochNanos(java.time.Instant.now());
    private final AtomicLong nextId = new AtomicLong(firstId);

    private static long epochNanos(java.time.Instant t) {
        return t.getEpochSecond() * 1_000_000_000L + t.getNano();
    }
    /** Transactions that committed, and that failed, warm-up included: what the rows must add up to. */
    private final AtomicLong committedAll = new AtomicLong(), failedAll = new AtomicLong();
    private Databases db;
    private Databases.Check before;
    private final com.sun.management.OperatingSystemMXBean os =
            (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
    private final ThreadMXBean tmx = ManagementFactory.getThreadMXBean();
    private final List<Long> threadIds = new ArrayList<>();

    /** What a run measured, the rows it left in tandem_bench ({pg, maria}), and how many transactions failed, warm-up included. */
    record Result(List<Stats> workloads, long[] rows, long failed) {
        /** Whether every workload's check found nothing prepared and the rows of every committed transaction on both databases. */
        boolean checksPassed() {
            return workloads.stream().allMatch(s -> Boolean.TRUE.equals(s.checkPassed));
        }
    }

    Result run(Flags f, PrintStream out, PrintStream log) throws Fatal {
        try {
            db = new Databases(Dsn.postgres(f.pg), Dsn.mariadb(f.maria));
        } catch (IllegalArgumentException e) {
            throw new Fatal(e.getMessage(), e);
        }
        List<Stats> states = new ArrayList<>();
        List<Workload> made = new ArrayList<>();
        Side[] sides = new Side[f.threads];
        ExecutorService pool = Executors.newFixedThreadPool(f.threads, r -> {
            Thread t = new Thread(r, "bench-worker");
            t.setDaemon(true);
            synchronized (threadIds) {
                threadIds.add(t.getId());
            }
            return t;
        });
        try {
            for (int t = 0; t < f.threads; t++) {
                sides[t] = new Side("bench-side-" + t);
                threadIds.add(sides[t].threadId);
            }
            // The coordinator is checked first: a wrong address leaves the databases untouched.
            Workload[] wls = new Workload[f.workloads.size()];
            for (int i = 0; i < wls.length; i++) {
                String name = f.workloads.get(i);
                wls[i] = switch (name) {
                    case "sql" -> new SqlWorkload(db);
                    case "raw2pc" -> new Raw2pcWorkload(db);
                    case "raw2pc-xa" -> new Raw2pcXAWorkload(db);
                    case "tandem", "tandem-coord" -> Tandem.workload(name, db, f.coordinator, f.threads);
                    default -> null; // a Java transaction manager: started once the databases answer
                };
                if (wls[i] != null) {
                    made.add(wls[i]);
                }
            }
            try {
                List<String> rolled = db.setup();
                if (!rolled.isEmpty()) {
                    log.println("bench: rolled back raw2pc branches a previous run left prepared: " + rolled);
                }
                before = db.check();
            } catch (Databases.Unreachable e) {
                throw new Fatal(e.getMessage(), e);
            } catch (java.sql.SQLException e) {
                throw new Fatal("reading the prepared branches before the run: " + describe(e), e);
            }
            if (!before.pgPrepared().isEmpty() || !before.mariaPrepared().isEmpty()) {
                log.println("bench: prepared before the run (not this run's: left alone, and not counted by the checks): pg "
                        + before.pgPrepared() + ", maria " + before.mariaPrepared());
            }
            Path dir = Path.of(f.dir);
            for (int i = 0; i < wls.length; i++) {
                String name = f.workloads.get(i);
                if (wls[i] == null) {
                    wls[i] = switch (name) {
                        case "narayana", "narayana-journal" -> Narayana.workload(name, db, dir, log);
                        case "atomikos" -> Atomikos.workload(db, dir, f.threads, log);
                        default -> throw new IllegalStateException("workload " + name + " unknown to Main");
                    };
                    made.add(wls[i]);
                }
                states.add(new Stats(wls[i], f.threads));
            }
            for (Stats st : states) {
                Workload wl = st.wl;
                String name = wl.name();
                for (int t = 0; t < f.threads; t++) {
                    try {
                        st.workers[t] = wl.open(t, sides[t]);
                    } catch (Exception e) {
                        throw new Fatal(name + ": thread " + t + " cannot open its connections: " + describe(e), e);
                    }
                }
            }
            measure(f, states, pool, out, log);
            for (Stats st : states) {
                if (st.checkPassed == null) { // a workload that never ran a measured slice
                    check(st);
                    out.println(st.checkLine);
                }
            }
            long[] rows;
            try {
                rows = db.count();
            } catch (Exception e) {
                throw new Fatal("counting the rows after the run: " + describe(e), e);
            }
            long committed = nextId.get() - firstId;
            out.printf("rows in tandem_bench: pg %d, maria %d (ids handed out %d, failed transactions %d)%n",
                    rows[0], rows[1], committed, states.stream().mapToLong(s -> s.errs).sum());
            return new Result(states, rows, failedAll.get());
        } finally {
            for (Stats st : states) {
                for (Workload.Worker w : st.workers) {
                    if (w != null) {
                        w.close();
                    }
                }
            }
            for (Workload wl : made) {
                try {
                    wl.close();
                } catch (Exception e) {
                    log.println("bench: closing " + wl.name() + ": " + describe(e));
                }
            }
            for (Side s : sides) {
                if (s != null) {
                    s.close();
                }
            }
            pool.shutdownNow();
        }
    }

    static String describe(Throwable e) {
        StringBuilder s = new StringBuilder(String.valueOf(e));
        for (Throwable c = e.getCause(); c != null && c != c.getCause(); c = c.getCause()) {
            s.append(": caused by ").append(c);
        }
        return s.toString();
    }

    private void measure(Flags f, List<Stats> states, ExecutorService pool, PrintStream out, PrintStream log) throws Fatal {
        // Warm-up: connections, the JIT, the coordinator's pools; then forget it.
        if (!f.warmup.isZero()) {
            for (Stats st : states) {
                slice(st, pool, f.warmup.toNanos(), false);
                if (st.txns == 0 && st.errs > 0) {
                    throw new Fatal(st.wl.name() + ": every warm-up transaction failed; the first: " + st.firstError, null);
                }
                st.txns = st.errs = st.nlat = 0;
                st.firstError = null;
            }
        }
        long sliceN = f.slice.toNanos(), durN = f.duration.toNanos();
        MachineCpu.Sample m0 = MachineCpu.sample();
        java.util.Map<String, Long> cpu0 = f.cpuByThread ? allThreadsCpu() : null;
        long[] gc0 = {gcMillis(), gcCount()};
        long jit0 = jitMillis();
        long start = System.nanoTime(), lastProgress = start;
        while (true) {
            int active = 0;
            for (Stats st : states) {
                long left = durN - st.elapsedNanos;
                if (left <= sliceN / 10) {
                    continue;
                }
                active++;
                slice(st, pool, Math.min(left, sliceN), true);
                if (durN - st.elapsedNanos <= sliceN / 10) {
                    check(st); // its last slice: every worker is idle, and so is every other workload
                }
                if (!f.progress.isZero() && System.nanoTime() - lastProgress >= f.progress.toNanos()) {
                    lastProgress = System.nanoTime();
                    StringBuilder s = new StringBuilder();
                    for (Stats x : states) {
                        s.append(s.length() == 0 ? "" : " | ").append(String.format("%s %d txns %.0f TPS", x.wl.name(), x.txns, x.tps()));
                    }
                    log.printf("bench: %5.1fs  %s%n", (lastProgress - start) / 1e9, s);
                }
            }
            if (active == 0) {
                break;
            }
        }
        MachineCpu.Sample m1 = MachineCpu.sample();
        report(f, states, MachineCpu.describe(m0, m1), out);
        if (f.cpuByThread) {
            cpuByThread(cpu0, allThreadsCpu(), out);
            out.printf("  (not in the list: the JVM's own threads) garbage collection %d ms in %d collections, JIT compilation %d ms (wall time, all CPUs)%n",
                    gcMillis() - gc0[0], gcCount() - gc0[1], jitMillis() - jit0);
        }
    }

    /**
     * The check after a workload's last slice, while nothing runs: no branch
     * prepared since the run began on either database (waiting up to 5 s for
     * one to go, e.g. a TM's phase 2 finishing late, and saying so), and on
     * both the same rows, as many as the transactions that committed (warm-up
     * included; with failed transactions, up to that many more, as a failure
     * after the commit leaves its rows). Records the outcome and a line for
     * the report in {@code st}.
     */
    private void check(Stats st) throws Fatal {
        long t0 = System.nanoTime();
        Databases.Check c, first = null;
        try {
            while (true) {
                c = db.check().without(before);
                if (first == null) {
                    first = c;
                }
                if (c.pgPrepared().isEmpty() && c.mariaPrepared().isEmpty() || System.nanoTime() - t0 > 5_000_000_000L) {
                    break;
                }
                Thread.sleep(100);
            }
        } catch (java.sql.SQLException e) {
            throw new Fatal("the check after " + st.wl.name() + ": " + describe(e), e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new Fatal("interrupted", e);
        }
        long waited = (System.nanoTime() - t0) / 1_000_000;
        long committed = committedAll.get(), failed = failedAll.get();
        boolean prepared = !c.pgPrepared().isEmpty() || !c.mariaPrepared().isEmpty();
        boolean rows = c.pgRows() == c.mariaRows() && c.pgRows() >= committed && c.pgRows() <= committed + failed;
        st.checkPassed = !prepared && rows;
        String left = prepared
                ? String.format("LEFT PREPARED after %d ms: pg %s, maria %s", waited, head(c.pgPrepared()), head(c.mariaPrepared()))
                : "nothing left prepared (pg_prepared_xacts 0, XA RECOVER 0" + (first == c ? ""
                        : String.format(" after %d ms; at first pg %s, maria %s", waited, head(first.pgPrepared()), head(first.mariaPrepared()))) + ")";
        String counted = failed == 0 ? "committed " + committed : String.format("committed %d + failed %d", committed, failed);
        st.checkLine = String.format("check after %s: %s; rows pg %d, maria %d, %s: %s", st.wl.name(), left, c.pgRows(), c.mariaRows(), counted,
                st.checkPassed ? "ok" : "FAILED");
    }

    private static String head(List<String> l) {
        return l.size() <= 3 ? l.toString() : l.subList(0, 3) + " and " + (l.size() - 3) + " more";
    }

    /** CPU time of every live thread, by name with digits folded (pool-1-thread-3 → pool-#-thread-#). */
    private java.util.Map<String, Long> allThreadsCpu() {
        java.util.Map<String, Long> m = new java.util.HashMap<>();
        for (java.lang.management.ThreadInfo ti : tmx.getThreadInfo(tmx.getAllThreadIds())) {
            if (ti != null) {
                long c = tmx.getThreadCpuTime(ti.getThreadId());
                if (c > 0) {
                    m.merge(ti.getThreadName().replaceAll("\\d+", "#"), c, Long::sum);
                }
            }
        }
        return m;
    }

    /** The measured time's JVM CPU by thread group, largest first (what the JIT, GC, gRPC and the TM's own threads take). */
    private static void cpuByThread(java.util.Map<String, Long> a, java.util.Map<String, Long> b, PrintStream out) {
        out.println("JVM CPU by thread during the measured slices (all workloads):");
        b.entrySet().stream()
                .map(e -> java.util.Map.entry(e.getKey(), e.getValue() - a.getOrDefault(e.getKey(), 0L)))
                .filter(e -> e.getValue() > 0)
                .sorted((x, y) -> Long.compare(y.getValue(), x.getValue()))
                .limit(12)
                .forEach(e -> out.printf("  %-40s %8.0f ms%n", e.getKey(), e.getValue() / 1e6));
    }

    private static long gcMillis() {
        return ManagementFactory.getGarbageCollectorMXBeans().stream().mapToLong(b -> Math.max(0, b.getCollectionTime())).sum();
    }

    private static long gcCount() {
        return ManagementFactory.getGarbageCollectorMXBeans().stream().mapToLong(b -> Math.max(0, b.getCollectionCount())).sum();
    }

    private static long jitMillis() {
        var c = ManagementFactory.getCompilationMXBean();
        return c != null && c.isCompilationTimeMonitoringSupported() ? c.getTotalCompilationTime() : 0;
    }

    private long threadsCpu() {
        long sum = 0;
        for (long id : threadIds) {
            long c = tmx.getThreadCpuTime(id);
            if (c > 0) {
                sum += c;
            }
        }
        return sum;
    }

    /** Runs st on every thread for n nanoseconds. */
    private void slice(Stats st, ExecutorService pool, long n, boolean measure) throws Fatal {
        long cpu0 = os.getProcessCpuTime(), tc0 = threadsCpu();
        long t0 = System.nanoTime(), stopAt = t0 + n;
        List<Future<?>> fs = new ArrayList<>();
        for (Workload.Worker w : st.workers) {
            fs.add(pool.submit(() -> {
                loop(st, w, stopAt);
                return null;
            }));
        }
        for (Future<?> fu : fs) {
            try {
                fu.get();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new Fatal("interrupted", e);
            } catch (java.util.concurrent.ExecutionException e) {
                throw new Fatal(st.wl.name() + ": " + e.getCause().getMessage(), e.getCause());
            }
        }
        if (measure) {
            st.elapsedNanos += System.nanoTime() - t0;
            st.procCpuNanos += os.getProcessCpuTime() - cpu0;
            st.threadCpuNanos += threadsCpu() - tc0;
        }
    }

    private void loop(Stats st, Workload.Worker w, long stopAt) throws Fatal {
        long[] lat = new long[256];
        int n = 0;
        long txns = 0, errs = 0;
        String error = null;
        while (System.nanoTime() < stopAt) {
            long id = nextId.incrementAndGet();
            long t0 = System.nanoTime();
            try {
                w.txn(id);
            } catch (Exception e) {
                errs++;
                failedAll.incrementAndGet();
                if (error == null) {
                    error = describe(e);
                }
                try {
                    w.recover();
                } catch (Exception re) {
                    throw new Fatal("a transaction failed (" + error + ") and the thread cannot reconnect: " + describe(re), re);
                }
                continue;
            }
            long d = System.nanoTime() - t0;
            committedAll.incrementAndGet();
            if (n == lat.length) {
                lat = Arrays.copyOf(lat, 2 * n);
            }
            lat[n++] = d;
            txns++;
        }
        st.add(lat, n, txns, errs, error);
    }

    private void report(Flags f, List<Stats> states, String machine, PrintStream out) {
        Stats base = states.stream().filter(s -> s.wl.name().equals("sql")).findFirst().orElse(states.get(0));
        out.printf("tandem-jta bench: %d threads, %s per workload in slices of %s, warm-up %s per workload; Java %s, %d CPUs%s%n",
                f.threads, human(f.duration), human(f.slice), human(f.warmup), System.getProperty("java.version"),
                Runtime.getRuntime().availableProcessors(), machine.isEmpty() ? "" : "; " + machine);
        out.printf("%-16s %9s %9s %9s %9s %9s %13s %15s %7s %9s%n", "workload", "txns", "TPS", "p50 ms", "p95 ms", "p99 ms", "JVM CPU/txn", "thread CPU/txn", "errors", "TPS÷" + base.wl.name());
        for (Stats s : states) {
            out.printf("%-16s %9d %9.0f %9.2f %9.2f %9.2f %10.0f µs %12.0f µs %7d %9.2f%n", s.wl.name(), s.txns, s.tps(), s.quantileMs(0.50), s.quantileMs(0.95), s.quantileMs(0.99),
                    s.txns == 0 ? 0 : s.procCpuNanos / 1e3 / s.txns, s.txns == 0 ? 0 : s.threadCpuNanos / 1e3 / s.txns, s.errs,
                    base.tps() == 0 ? 0 : s.tps() / base.tps());
        }
        for (Stats s : states) {
            if (s.checkLine != null) {
                out.println(s.checkLine);
            }
        }
        for (Stats s : states) {
            if (s.firstError != null) {
                out.printf("%s: %d failed transactions; the first: %s%n", s.wl.name(), s.errs, s.firstError);
            }
        }
    }

    private static String human(java.time.Duration d) {
        return d.toMillis() % 1000 == 0 ? d.toSeconds() + "s" : d.toMillis() + "ms";
    }
}
