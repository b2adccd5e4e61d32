package io.github.tandemtx.bench;

/** The tandem workload: one JTA transaction through tandem-jta. */
final class Tandem {
    private Tandem() {}

    static Workload workload(Databases db, String coordinator) {
        throw new UnsupportedOperationException("the tandem workload is not built yet");
    }
}
