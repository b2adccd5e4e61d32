package io.github.tandemtx.bench;

import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * A worker's second thread: {@link #both} runs one step on it and the other on
 * the caller, and waits for both, so that the two databases' prepares or
 * commits overlap as in the Go benchmark (and as a transaction manager that
 * prepares in parallel does).
 */
final class Side implements AutoCloseable {
    /** A step that may fail. */
    interface Step {
        void run() throws Exception;
    }

    private final ExecutorService exec;
    volatile long threadId = -1;

    Side(String name) {
        exec = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, name);
            t.setDaemon(true);
            threadId = t.getId();
            return t;
        });
        // Start the thread now, so its id is known before the first slice.
        try {
            exec.submit(() -> {}).get();
        } catch (InterruptedException | ExecutionException e) {
            throw new IllegalStateException(e);
        }
    }

    /**
     * Runs a on the side thread and b on this one; returns when both are
     * done. The first failure is thrown, the other attached as suppressed.
     */
    void both(Step a, Step b) throws Exception {
        Future<?> f = exec.submit(() -> {
            a.run();
            return null;
        });
        Exception eb = null;
        try {
            b.run();
        } catch (Exception e) {
            eb = e;
        }
        Exception ea = null;
        try {
            f.get();
        } catch (ExecutionException e) {
            ea = e.getCause() instanceof Exception x ? x : new Exception(e.getCause());
        }
        if (ea != null && eb != null) {
            ea.addSuppressed(eb);
        }
        if (ea != null) {
            throw ea;
        }
        if (eb != null) {
            throw eb;
        }
    }

    @Override
    public void close() {
        exec.shutdownNow();
    }
}
