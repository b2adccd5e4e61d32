package io.github.tandemtx.bench;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.FileStore;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.stream.Stream;

/**
 * A transaction manager's log directory for one run: a new
 * {@code .tandem-bench-<workload>-*} directory under --dir (as the Go
 * benchmark's {@code .tandem-bench-coordinator-*}), removed at the end. Its
 * file system is named in the log, with a warning when it is one where a
 * sync makes nothing durable (tmpfs): the TM's log would then cost nothing.
 */
record TmDir(Path path) implements AutoCloseable {
    static TmDir create(Path parent, String workload, PrintStream log) throws Main.Fatal {
        Path p;
        try {
            p = Files.createTempDirectory(parent, ".tandem-bench-" + workload + "-").toAbsolutePath().normalize();
        } catch (IOException | RuntimeException e) {
            throw new Main.Fatal(workload + ": cannot make a directory for its log under " + parent.toAbsolutePath()
                    + " (--dir): " + Main.describe(e), e);
        }
        String fs = "?";
        try {
            FileStore s = Files.getFileStore(p);
            fs = s.type();
        } catch (IOException e) {
            // only for the log line
        }
        log.printf("bench: %s: its log in %s (%s)%n", workload, p, fs);
        if (fs.equals("tmpfs") || fs.equals("ramfs")) {
            log.printf("bench: WARNING: %s's log is on %s, where a sync makes nothing durable: use --dir on the databases' disk%n", workload, fs);
        }
        return new TmDir(p);
    }

    /** Removes the directory and everything in it; a file that cannot be removed is left. */
    @Override
    public void close() {
        try (Stream<Path> s = Files.walk(path)) {
            s.sorted(Comparator.reverseOrder()).forEach(f -> {
                try {
                    Files.deleteIfExists(f);
                } catch (IOException e) {
                    // left behind: named by its .tandem-bench- prefix
                }
            });
        } catch (IOException e) {
            // nothing there
        }
    }
}
