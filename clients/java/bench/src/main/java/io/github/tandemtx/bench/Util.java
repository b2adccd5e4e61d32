package io.github.tandemtx.bench;

final class Util {
    private Util() {}

    static void closeQuietly(javax.sql.PooledConnection... cs) {
        for (javax.sql.PooledConnection c : cs) {
            if (c != null) {
                try {
                    c.close();
                } catch (Exception e) {
                    // closing a broken connection: nothing to do
                }
            }
        }
    }

    static void closeQuietly(AutoCloseable... cs) {
        for (AutoCloseable c : cs) {
            if (c != null) {
                try {
                    c.close();
                } catch (Exception e) {
                    // closing a broken connection: nothing to do
                }
            }
        }
    }
}
