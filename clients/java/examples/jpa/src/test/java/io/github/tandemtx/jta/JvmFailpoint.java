package io.github.tandemtx.jta;

/**
 * Test-only access to tandem-jta's commit-path failpoints
 * (TandemTransaction.failpoint is package-private; this class shares the
 * package on the test class path): JpaCrashTest's child JVM halts at one,
 * as a kill would (no shutdown hooks, no clean-up).
 */
public final class JvmFailpoint {
    private JvmFailpoint() {}

    /** Halts the JVM (exit status 137) when the commit path reaches step, e.g. "after-commit-point". */
    public static void haltAt(String step) {
        TandemTransaction.failpoint = s -> {
            if (s.equals(step)) {
                System.out.println("HALT " + s);
                System.out.flush();
                Runtime.getRuntime().halt(137);
            }
        };
    }
}
