package io.github.tandemtx.bench;

import java.nio.charset.StandardCharsets;
import java.util.concurrent.ThreadLocalRandom;
import javax.transaction.xa.Xid;

/**
 * The raw2pc workload's branch identifiers: format "BENC" (as the Go
 * benchmark's raw2pc), never Tandem's, so that a coordinator's in-doubt scan
 * leaves them alone; gtrid 16 random bytes; bqual the RM's name.
 */
record Xids(int formatId, byte[] gtrid, byte[] bqual) implements Xid {
    /** "BENC": the Go benchmark's rawFormatID. */
    static final int BENCH_FORMAT = 0x42454E43;

    static Xids branch(byte[] gtrid, String rm) {
        return new Xids(BENCH_FORMAT, gtrid, rm.getBytes(StandardCharsets.UTF_8));
    }

    static byte[] newGtrid() {
        byte[] g = new byte[16];
        ThreadLocalRandom.current().nextBytes(g);
        return g;
    }

    @Override
    public int getFormatId() {
        return formatId;
    }

    @Override
    public byte[] getGlobalTransactionId() {
        return gtrid;
    }

    @Override
    public byte[] getBranchQualifier() {
        return bqual;
    }
}
