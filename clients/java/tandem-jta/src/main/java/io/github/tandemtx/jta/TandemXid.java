package io.github.tandemtx.jta;

import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.regex.Pattern;
import javax.transaction.xa.Xid;

/**
 * The XID of one branch, in Tandem's format (the Go package {@code xid}, and
 * {@code api/README.md}): format ID {@link #FORMAT_ID} ("TAND"), the global
 * transaction id as its 32 lowercase hex digits in ASCII, and the branch
 * qualifier as the resource manager's configured name in ASCII.
 *
 * <p>On PostgreSQL the branch's GID is {@code tandem:<gtrid>:<rm>}; on MariaDB
 * its XID is {@code '<gtrid>','<rm>',1413566020}. These are the names the
 * coordinator's recovery scans for, so a branch a dead JVM left prepared is
 * settled by the coordinator exactly like one the Go SDK left.
 */
public final class TandemXid implements Xid {
    /** The XA format identifier of every Tandem branch decided by the coordinator: 0x54414E44. */
    public static final int FORMAT_ID = 0x54414E44;
    /** The prefix of every Tandem branch's GID on PostgreSQL. */
    public static final String POSTGRES_PREFIX = "tandem:";

    private static final SecureRandom RANDOM = new SecureRandom();
    private static final Pattern RM_NAME = Pattern.compile("[a-z0-9][a-z0-9_-]{0,31}");
    private static final Pattern GTRID = Pattern.compile("[0-9a-f]{32}");

    private final String gtrid;
    private final String rm;

    private TandemXid(String gtrid, String rm) {
        this.gtrid = gtrid;
        this.rm = rm;
    }

    /**
     * Returns a fresh global transaction id: 16 bytes as 32 lowercase hex digits,
     * a 2-byte shard prefix (0), 6 bytes of milliseconds since the epoch (big
     * endian) and 8 random bytes from a cryptographic source. Made locally: no
     * round trip.
     */
    public static String newGtrid() {
        byte[] g = new byte[16];
        long ms = System.currentTimeMillis();
        for (int i = 0; i < 6; i++) {
            g[2 + i] = (byte) (ms >>> (8 * (5 - i)));
        }
        byte[] r = new byte[8];
        RANDOM.nextBytes(r);
        System.arraycopy(r, 0, g, 8, 8);
        return HexFormat.of().formatHex(g);
    }

    /**
     * Names the branch of {@code gtrid} on resource manager {@code rm}.
     *
     * @throws IllegalArgumentException when either is malformed: the gtrid is
     *     not 32 lowercase hex digits, or the name is not 1 to 32 characters of
     *     a-z, 0-9, '_' or '-' starting with a letter or digit
     */
    public static TandemXid of(String gtrid, String rm) {
        if (!GTRID.matcher(gtrid).matches() || gtrid.chars().allMatch(c -> c == '0')) {
            throw new IllegalArgumentException("malformed gtrid \"" + gtrid + "\": want 32 lowercase hex digits, not all zero");
        }
        validateRmName(rm);
        return new TandemXid(gtrid, rm);
    }

    /** Checks a resource manager's name (the branch qualifier). */
    public static void validateRmName(String rm) {
        if (rm == null || !RM_NAME.matcher(rm).matches()) {
            throw new IllegalArgumentException("malformed resource manager name \"" + rm
                    + "\": want 1 to 32 characters of a-z, 0-9, '_' or '-' (not first), as in the coordinator's --rm");
        }
    }

    /**
     * Reads a foreign {@link Xid} as Tandem's, or returns null when it is not
     * in Tandem's format.
     */
    public static TandemXid from(Xid x) {
        if (x instanceof TandemXid t) {
            return t;
        }
        if (x == null || x.getFormatId() != FORMAT_ID) {
            return null;
        }
        try {
            return of(new String(x.getGlobalTransactionId(), StandardCharsets.US_ASCII),
                    new String(x.getBranchQualifier(), StandardCharsets.US_ASCII));
        } catch (IllegalArgumentException e) {
            return null;
        }
    }

    /** The global transaction id, 32 lowercase hex digits. */
    public String gtrid() {
        return gtrid;
    }

    /** The resource manager's name: the branch qualifier. */
    public String rm() {
        return rm;
    }

    /** The prepared transaction's GID on PostgreSQL: {@code tandem:<gtrid>:<rm>}. */
    public String postgresGid() {
        return POSTGRES_PREFIX + gtrid + ":" + rm;
    }

    /** The XID as written in MariaDB's XA statements: {@code '<gtrid>','<rm>',1413566020}. */
    public String mysqlXid() {
        return "'" + gtrid + "','" + rm + "'," + FORMAT_ID;
    }

    @Override
    public int getFormatId() {
        return FORMAT_ID;
    }

    @Override
    public byte[] getGlobalTransactionId() {
        return gtrid.getBytes(StandardCharsets.US_ASCII);
    }

    @Override
    public byte[] getBranchQualifier() {
        return rm.getBytes(StandardCharsets.US_ASCII);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Xid x && x.getFormatId() == FORMAT_ID
                && Arrays.equals(x.getGlobalTransactionId(), getGlobalTransactionId())
                && Arrays.equals(x.getBranchQualifier(), getBranchQualifier());
    }

    @Override
    public int hashCode() {
        return gtrid.hashCode() * 31 + rm.hashCode();
    }

    @Override
    public String toString() {
        return gtrid + ":" + rm;
    }
}
