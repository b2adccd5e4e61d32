package io.github.tandemtx.bench;

import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;

/**
 * The machine's CPU over an interval, from /proc (Linux; elsewhere it reports
 * nothing): all CPUs' busy share, and the part of it taken by this JVM, by
 * the databases (postgres, mariadbd/mysqld processes), by Tandem
 * coordinators (processes named tandem), and by everything else — other
 * work on a shared machine, which the figures must be read beside.
 */
final class MachineCpu {
    /** Busy and total jiffies of all CPUs, and busy jiffies per group. */
    record Sample(long busy, long total, Map<String, Long> groups) {}

    static final String JVM = "this JVM", DB = "databases", COORD = "coordinator";

    static Sample sample() {
        try {
            String[] f = Files.readAllLines(Path.of("/proc/stat")).get(0).trim().split("\\s+");
            long total = 0, idle = 0;
            for (int i = 1; i < f.length && i <= 8; i++) {
                long v = Long.parseLong(f[i]);
                total += v;
                if (i == 4 || i == 5) {
                    idle += v; // idle, iowait
                }
            }
            Map<String, Long> g = new HashMap<>();
            long self = ProcessHandle.current().pid();
            try (DirectoryStream<Path> ds = Files.newDirectoryStream(Path.of("/proc"), "[0-9]*")) {
                for (Path p : ds) {
                    String s;
                    try {
                        s = Files.readString(p.resolve("stat"));
                    } catch (IOException e) {
                        continue; // exited
                    }
                    int a = s.indexOf('('), b = s.lastIndexOf(')');
                    if (a < 0 || b < 0) {
                        continue;
                    }
                    String comm = s.substring(a + 1, b);
                    String[] rest = s.substring(b + 2).split(" ");
                    long t = Long.parseLong(rest[11]) + Long.parseLong(rest[12]); // utime, stime
                    String group;
                    if (Long.parseLong(p.getFileName().toString()) == self) {
                        group = JVM;
                    } else if (comm.equals("postgres") || comm.equals("mariadbd") || comm.equals("mysqld")) {
                        group = DB;
                    } else if (comm.equals("tandem")) {
                        group = COORD;
                    } else {
                        group = "pid " + p.getFileName(); // kept apart so that exits do not go negative
                    }
                    g.merge(group, t, Long::sum);
                }
            }
            return new Sample(total - idle, total, g);
        } catch (IOException | RuntimeException e) {
            return null;
        }
    }

    /**
     * "machine 87% busy: this JVM 40%, databases 35%, coordinator 5%, others
     * 7%", in percent of all CPUs, or "" off Linux.
     */
    static String describe(Sample a, Sample b) {
        if (a == null || b == null || b.total <= a.total) {
            return "";
        }
        double total = b.total - a.total;
        long named = 0;
        StringBuilder s = new StringBuilder();
        s.append(String.format("machine %.0f%% busy:", 100 * (b.busy - a.busy) / total));
        for (String g : new String[] {JVM, DB, COORD}) {
            long d = b.groups.getOrDefault(g, 0L) - a.groups.getOrDefault(g, 0L);
            named += d;
            s.append(String.format(" %s %.0f%%,", g, 100 * d / total));
        }
        s.append(String.format(" others %.0f%%", 100 * Math.max(0, b.busy - a.busy - named) / total));
        return s.toString();
    }
}
