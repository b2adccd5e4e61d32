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
 *
 * <p>A branch decided by a commit point (another branch of the transaction,
 * whose local commit records the decision in its database's
 * {@code tandem_decision} table) carries that resource manager's name:
 * {@code tandemcp:<gtrid>:<rm>:<cp>} on PostgreSQL, and on MariaDB format ID
 * {@link #COMMIT_POINT_FORMAT_ID} ("TANC") with the commit point's name
 * appended to the gtrid part: {@code '<gtrid><cp>','<rm>',1413566019}.
 * Whoever finds such a branch prepared settles it only through the commit
 * point's decision table, never by presuming abort.
 */
public final class TandemXid implements Xid {
    /** The XA format identifier of every Tandem branch decided by the coordinator: 0x54414E44. */
    public static final int FORMAT_ID = 0x54414E44;
    /** The XA format identifier of every Tandem branch decided by a commit point: 0x54414E43. */
    public static final int COMMIT_POINT_FORMAT_ID = 0x54414E43;
    /** The prefix of every Tandem branch's GID on PostgreSQL. */
    public static final String POSTGRES_PREFIX = "tandem:";
    /** The prefix of every Tandem branch's GID on PostgreSQL decided by a commit point. */
    public static final String POSTGRES_COMMIT_POINT_PREFIX = "tandemcp:";

    private static final SecureRandom RANDOM = new SecureRandom();
    private static final Pattern RM_NAME = Pattern.compile("[a-z0-9][a-z0-9_-]{0,31}");
    private static final Pattern GTRID = Pattern.compile("[0-9a-f]{32}");

    private final String gtrid;
    private final String rm;
    private final String commitPoint; // null: decided by the coordinator

    private TandemXid(String gtrid, String rm, String commitPoint) {
        this.gtrid = gtrid;
        this.rm = rm;
        this.commitPoint = commitPoint;
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
        return new TandemXid(gtrid, rm, null);
    }

    /** This branch named as decided by the commit point on resource manager cp. */
    public TandemXid withCommitPoint(String cp) {
        validateRmName(cp);
        return new TandemXid(gtrid, rm, cp);
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
        if (x == null || x.getFormatId() != FORMAT_ID && x.getFormatId() != COMMIT_POINT_FORMAT_ID) {
            return null;
        }
        try {
            String g = new String(x.getGlobalTransactionId(), StandardCharsets.US_ASCII);
            TandemXid t = of(g.substring(0, Math.min(32, g.length())), new String(x.getBranchQualifier(), StandardCharsets.US_ASCII));
            if (x.getFormatId() == COMMIT_POINT_FORMAT_ID) {
                return t.withCommitPoint(g.length() > 32 ? g.substring(32) : "");
            }
            return g.length() == 32 ? t : null;
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

    /** The resource manager whose commit decides this branch, or null when the coordinator decides. */
    public String commitPoint() {
        return commitPoint;
    }

    /**
     * The prepared transaction's GID on PostgreSQL: {@code tandem:<gtrid>:<rm>},
     * or {@code tandemcp:<gtrid>:<rm>:<cp>} when a commit point decides.
     */
    public String postgresGid() {
        if (commitPoint != null) {
            return POSTGRES_COMMIT_POINT_PREFIX + gtrid + ":" + rm + ":" + commitPoint;
        }
        return POSTGRES_PREFIX + gtrid + ":" + rm;
    }

    /**
     * The XID as written in MariaDB's XA statements:
     * {@code '<gtrid>','<rm>',1413566020}, or
     * {@code '<gtrid><cp>','<rm>',1413566019} when a commit point decides.
     */
    public String mysqlXid() {
        if (commitPoint != null) {
            return "'" + gtrid + commitPoint + "','" + rm + "'," + COMMIT_POINT_FORMAT_ID;
        }
        return "'" + gtrid + "','" + rm + "'," + FORMAT_ID;
    }

    @Override
    public int getFormatId() {
        return commitPoint != null ? COMMIT_POINT_FORMAT_ID : FORMAT_ID;
    }

    @Override
    public byte[] getGlobalTransactionId() {
        return (commitPoint != null ? gtrid + commitPoint : gtrid).getBytes(StandardCharsets.US_ASCII);
    }

    @Override
    public byte[] getBranchQualifier() {
        return rm.getBytes(StandardCharsets.US_ASCII);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Xid x && x.getFormatId() == getFormatId()
                && Arrays.equals(x.getGlobalTransactionId(), getGlobalTransactionId())
                && Arrays.equals(x.getBranchQualifier(), getBranchQualifier());
    }

    @Override
    public int hashCode() {
        return gtrid.hashCode() * 31 + rm.hashCode();
    }

    @Override
    public String toString() {
        return gtrid + ":" + rm + (commitPoint != null ? ":" + commitPoint : "");
    }
}
