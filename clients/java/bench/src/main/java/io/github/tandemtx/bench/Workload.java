package io.github.tandemtx.bench;

/**
 * One workload of the benchmark: the same unit of work (one insert on each
 * database) committed a different way.
 */
interface Workload extends AutoCloseable {
    /** The name on the command line and in the report. */
    String name();

    /** One line for the help. */
    String summary();

    /**
     * Opens thread {@code t}'s own connections. {@code side} runs the
     * PostgreSQL half of a parallel step (commit, prepare) while the thread
     * itself does MariaDB's, as the Go benchmark's goroutine does.
     */
    Worker open(int t, Side side) throws Exception;

    @Override
    default void close() throws Exception {}

    /** One thread's connections and its transaction. */
    interface Worker extends AutoCloseable {
        /** Runs one transaction inserting row {@code id} on both databases. */
        void txn(long id) throws Exception;

        /**
         * After a failed transaction: rolls back what it can and reopens
         * connections that are broken, so the next transaction starts clean.
         */
        void recover() throws Exception;

        @Override
        void close();
    }

    /** The statement every workload runs on each database. */
    String INSERT = "INSERT INTO tandem_bench (id, v) VALUES (?, ?)";

    /** The inserted row's v, as the Go benchmark's. */
    static String value(long id) {
        return "row " + id;
    }
}
