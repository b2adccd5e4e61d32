package io.github.tandemtx.bench;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** The command line: --name value or --name=value; a bad one says which and why. */
final class Flags {
    /** A flag the user got wrong: the message says which and what is expected. */
    static final class BadFlag extends Exception {
        BadFlag(String msg) {
            super(msg);
        }
    }

    List<String> workloads = List.of("sql", "raw2pc", "tandem");
    int threads = 2;
    Duration duration = Duration.ofSeconds(10);
    Duration slice = null; // default: 1s, or a quarter of duration if shorter
    Duration warmup = Duration.ofSeconds(3);
    Duration progress = Duration.ofSeconds(5);
    String pg = System.getenv().getOrDefault("TANDEM_PG_DSN", "");
    String maria = System.getenv().getOrDefault("TANDEM_MYSQL_DSN", "");
    String coordinator = System.getenv().getOrDefault("TANDEM_COORDINATOR", "");
    String dir = ".";
    boolean help;
    boolean cpuByThread;

    /** Every workload, in the order the help lists them. */
    static final List<String> WORKLOADS = List.of("sql", "raw2pc", "raw2pc-xa", "tandem", "tandem-coord", "narayana", "narayana-journal", "atomikos");

    static final Map<String, String> USAGE = new LinkedHashMap<>();

    static {
        USAGE.put("--workloads A,B,C", "workloads to run interleaved (default sql,raw2pc,tandem; also raw2pc-xa, tandem-coord: tandem-jta deciding at the coordinator, narayana, narayana-journal, atomikos — not both narayanas in one run); the ratio is TPS ÷ TPS of sql (or of the first)");
        USAGE.put("--threads N", "concurrent clients, each with its own connection to each database (atomikos: its pools hold N per database) (default 2)");
        USAGE.put("--duration D", "measured time per workload, e.g. 20s (default 10s)");
        USAGE.put("--slice D", "length of one interleaved slice (default 1s, or a quarter of --duration if shorter)");
        USAGE.put("--warmup D", "unmeasured time per workload before measuring: connections, the JIT, the coordinator's pools (default 3s; 0 for none)");
        USAGE.put("--pg URL", "PostgreSQL: a jdbc:postgresql: URL or a postgres:// DSN (default $TANDEM_PG_DSN)");
        USAGE.put("--maria URL", "MariaDB: a jdbc:mariadb: URL or a Go user:pass@tcp(host:port)/db DSN (default $TANDEM_MYSQL_DSN)");
        USAGE.put("--coordinator HOST:PORT", "the Tandem coordinator's gRPC address, for the tandem and tandem-coord workloads (default $TANDEM_COORDINATOR)");
        USAGE.put("--dir DIR", "where narayana's and atomikos's logs go: a new .tandem-bench-<workload>-* directory under DIR, removed at the end (default .: put it on the databases' disk)");
        USAGE.put("--cpu-by-thread", "also print the JVM's CPU by thread (JIT, GC, gRPC, the TM's executors) over the measured slices");
        USAGE.put("--progress D", "a progress line on stderr this often (default 5s; 0 for none)");
    }

    static Flags parse(String[] args) throws BadFlag {
        Flags f = new Flags();
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (a.equals("-h") || a.equals("--help") || a.equals("help")) {
                f.help = true;
                continue;
            }
            if (a.equals("--cpu-by-thread")) {
                f.cpuByThread = true;
                continue;
            }
            if (!a.startsWith("--")) {
                throw new BadFlag("unexpected argument " + a + " (flags start with --)");
            }
            String name = a.substring(2), value;
            int eq = name.indexOf('=');
            if (eq >= 0) {
                value = name.substring(eq + 1);
                name = name.substring(0, eq);
            } else if (i + 1 < args.length) {
                value = args[++i];
            } else {
                throw new BadFlag("flag --" + name + " needs a value");
            }
            switch (name) {
                case "workloads", "compare" -> {
                    List<String> ws = new ArrayList<>();
                    for (String w : value.split(",")) {
                        if (!w.isBlank()) {
                            if (!WORKLOADS.contains(w.trim())) {
                                throw new BadFlag("--workloads: unknown workload " + w + " (" + String.join(", ", WORKLOADS) + ")");
                            }
                            if (ws.contains(w.trim())) {
                                throw new BadFlag("--workloads: " + w + " given twice");
                            }
                            ws.add(w.trim());
                        }
                    }
                    if (ws.isEmpty()) {
                        throw new BadFlag("--workloads: give at least one of sql, raw2pc, tandem");
                    }
                    if (ws.contains("narayana") && ws.contains("narayana-journal")) {
                        throw new BadFlag("--workloads: narayana and narayana-journal cannot be in one run (Narayana's object store is one per JVM): run them one after the other");
                    }
                    f.workloads = ws;
                }
                case "threads" -> {
                    try {
                        f.threads = Integer.parseInt(value);
                    } catch (NumberFormatException e) {
                        throw new BadFlag("--threads " + value + ": not a number");
                    }
                    if (f.threads < 1 || f.threads > 1024) {
                        throw new BadFlag("--threads " + value + ": give 1 to 1024");
                    }
                }
                case "duration" -> f.duration = positive(name, value);
                case "slice" -> f.slice = positive(name, value);
                case "warmup" -> f.warmup = duration(name, value);
                case "progress" -> f.progress = duration(name, value);
                case "pg" -> f.pg = value;
                case "maria" -> f.maria = value;
                case "coordinator" -> f.coordinator = value;
                case "dir" -> {
                    if (!java.nio.file.Files.isDirectory(java.nio.file.Path.of(value))) {
                        throw new BadFlag("--dir " + value + ": not a directory");
                    }
                    f.dir = value;
                }
                default -> throw new BadFlag("unknown flag --" + name + " (see --help)");
            }
        }
        if (f.help) {
            return f;
        }
        if (f.pg.isEmpty() || f.maria.isEmpty()) {
            throw new BadFlag("no database: give --pg and --maria, or set TANDEM_PG_DSN and TANDEM_MYSQL_DSN (eval \"$(scripts/db env)\")");
        }
        if ((f.workloads.contains("tandem") || f.workloads.contains("tandem-coord")) && f.coordinator.isEmpty()) {
            throw new BadFlag("the tandem workloads need a coordinator: --coordinator HOST:PORT (or leave them out: --workloads sql,raw2pc)");
        }
        if (f.slice == null) {
            f.slice = f.duration.dividedBy(4).compareTo(Duration.ofSeconds(1)) < 0 ? f.duration.dividedBy(4) : Duration.ofSeconds(1);
        }
        return f;
    }

    private static Duration positive(String name, String v) throws BadFlag {
        Duration d = duration(name, v);
        if (d.isZero()) {
            throw new BadFlag("--" + name + " " + v + ": must be more than 0");
        }
        return d;
    }

    /** 250ms, 20s, 2m, 1m30s, or a bare 0. */
    static Duration duration(String name, String v) throws BadFlag {
        if (v.equals("0")) {
            return Duration.ZERO;
        }
        var m = java.util.regex.Pattern.compile("(\\d+)(ms|s|m|h)").matcher(v);
        Duration d = Duration.ZERO;
        int end = 0;
        while (m.lookingAt()) {
            long n = Long.parseLong(m.group(1));
            d = d.plus(switch (m.group(2)) {
                case "ms" -> Duration.ofMillis(n);
                case "s" -> Duration.ofSeconds(n);
                case "m" -> Duration.ofMinutes(n);
                default -> Duration.ofHours(n);
            });
            end = m.end();
            m.region(end, v.length());
        }
        if (end == 0 || end != v.length()) {
            throw new BadFlag("--" + name + " " + v + ": not a duration (e.g. 500ms, 20s, 1m30s)");
        }
        return d;
    }

    static String usage() {
        StringBuilder s = new StringBuilder();
        s.append("tandem-jta bench: one insert on PostgreSQL and one on MariaDB per transaction, each thread\n")
                .append("with its own connections (the unit of work of `tandem bench db`), committed as\n")
                .append("  sql     two independent local commits in parallel (not atomic): the baseline\n")
                .append("  raw2pc  the databases' own 2PC in SQL, the Go benchmark's statements: no coordinator, no log\n")
                .append("  raw2pc-xa  the same through the drivers' XAResources (MariaDB: 5 round trips, not 3)\n")
                .append("  tandem  one JTA transaction through tandem-jta and a Tandem coordinator\n")
                .append("  narayana  one JTA transaction through Narayana, its defaults (file object store);\n")
                .append("          narayana-journal: its journal store\n")
                .append("  atomikos  one JTA transaction through Atomikos, its defaults and its pools\n")
                .append("in one run, interleaved in slices, so that drift and other load hit all alike.\n")
                .append("Reports TPS, latency p50/p95/p99, the JVM's CPU per transaction (process CPU, and the\n")
                .append("worker threads' own), and each TPS ÷ sql's. Table tandem_bench is created on both\n")
                .append("databases if missing and emptied at the start. After each workload's last slice it\n")
                .append("checks that nothing is left prepared on either database and that both hold the rows\n")
                .append("of every committed transaction; exit status 3 when a check fails.\n\nFlags:\n");
        USAGE.forEach((k, v) -> s.append(String.format("  %-24s %s%n", k, v)));
        s.append("\nExample:\n  eval \"$(scripts/db env)\"\n")
                .append("  java -jar clients/java/bench/target/tandem-bench.jar --threads 32 --duration 20s --coordinator 127.0.0.1:7070\n");
        return s.toString();
    }
}
