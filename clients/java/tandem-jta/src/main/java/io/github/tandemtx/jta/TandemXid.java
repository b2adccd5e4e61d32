package io.github.tandemtx.jta;

import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.regex.Pattern;
import javax.transaction.xa.Xid;

/**
 * The XID of one branch, in Tandem's format: the Go package {@code xid}'s
 * names, exactly. Every branch this client names carries its owner (32
 * lowercase hex digits): the only party that may decide it by presumption —
 * the coordinator's cluster (Health's {@code cluster=}) for a branch the
 * coordinator decides, the commit point's decision table (its row in
 * {@code tandem_decision_id}) for one a commit point decides.
 *
 * <ul>
 *   <li>PostgreSQL GID: {@code tandem2:<gtrid>:<rm>:<owner>}, or
 *       {@code tandemcp2:<gtrid>:<rm>:<cp>:<owner>} when commit point cp
 *       decides;
 *   <li>MariaDB XID: {@code '<gtrid>','<owner><rm>',1413566002} (format
 *       {@link #OWNED_FORMAT_ID}, "TAN2"), or
 *       {@code '<gtrid><cp>','<owner><rm>',1413563186} (format
 *       {@link #OWNED_COMMIT_POINT_FORMAT_ID}, "TAC2").
 * </ul>
 *
 * <p>Names without an owner are the legacy ones ({@code tandem:<gtrid>:<rm>},
 * {@code tandemcp:<gtrid>:<rm>:<cp>}, formats "TAND" and "TANC"): a
 * coordinator lists them and settles them only when its operator says they
 * are its own ({@code --adopt-unowned}). This client writes one only for a
 * coordinator-decided branch when the coordinator's Health names no cluster
 * (a coordinator older than owners).
 *
 * <p>A branch a commit point decides is settled only through that commit
 * point's decision table, and only by a party whose connection reaches the
 * table with the owner's id: never by presuming abort.
 */
public final class TandemXid implements Xid {
    /** The XA format identifier of a legacy (unowned) branch decided by the coordinator: 0x54414E44, "TAND". */
    public static final int FORMAT_ID = 0x54414E44;
    /** The XA format identifier of a legacy (unowned) branch decided by a commit point: 0x54414E43, "TANC". */
    public static final int COMMIT_POINT_FORMAT_ID = 0x54414E43;
    /** The XA format identifier of a branch decided by the coordinator, owned by its cluster: 0x54414E32, "TAN2". */
    public static final int OWNED_FORMAT_ID = 0x54414E32;
    /** The XA format identifier of a branch decided by a commit point, owned by its decision table: 0x54414332, "TAC2". */
    public static final int OWNED_COMMIT_POINT_FORMAT_ID = 0x54414332;
    /** The prefix of a legacy branch's GID on PostgreSQL. */
    public static final String POSTGRES_PREFIX = "tandem:";
    /** The prefix of a legacy commit-point-decided branch's GID on PostgreSQL. */
    public static final String POSTGRES_COMMIT_POINT_PREFIX = "tandemcp:";
    /** The prefix of an owned, coordinator-decided branch's GID on PostgreSQL. */
    public static final String OWNED_PREFIX = "tandem2:";
    /** The prefix of an owned, commit-point-decided branch's GID on PostgreSQL. */
    public static final String OWNED_COMMIT_POINT_PREFIX = "tandemcp2:";

    private static final SecureRandom RANDOM = new SecureRandom();
    private static final Pattern RM_NAME = Pattern.compile("[a-z0-9][a-z0-9_-]{0,31}");
    private static final Pattern GTRID = Pattern.compile("[0-9a-f]{32}");
    private static final String ZERO = "0".repeat(32);

    private final String gtrid;
    private final String rm;
    private final String commitPoint; // null: decided by the coordinator
    private final String owner; // null: a legacy, unowned name

    private TandemXid(String gtrid, String rm, String commitPoint, String owner) {
        this.gtrid = gtrid;
        this.rm = rm;
        this.commitPoint = commitPoint;
        this.owner = owner;
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
        return new TandemXid(gtrid, rm, null, null);
    }

    /**
     * This branch named as decided by the coordinator whose cluster is owner
     * (null: the legacy, unowned name).
     */
    public TandemXid ownedBy(String owner) {
        return new TandemXid(gtrid, rm, commitPoint, owner == null ? null : checkOwner(owner));
    }

    /**
     * This branch named as decided by the commit point on resource manager
     * cp, whose decision table's id is table (null: the legacy name).
     */
    public TandemXid withCommitPoint(String cp, String table) {
        validateRmName(cp);
        return new TandemXid(gtrid, rm, cp, table == null ? null : checkOwner(table));
    }

    /**
     * The commit point's own branch on a session-bound database (MariaDB):
     * the branch of gtrid on cp decided by cp, owned by cp's decision table.
     * It is never prepared. The Go package's {@code xid.CommitPointSelf}.
     */
    public static TandemXid commitPointSelf(String gtrid, String cp, String table) {
        return of(gtrid, cp).withCommitPoint(cp, table);
    }

    /** Checks an owner id: 32 lowercase hex digits, not all zero. */
    static String checkOwner(String o) {
        if (o == null || !GTRID.matcher(o).matches() || o.equals(ZERO)) {
            throw new IllegalArgumentException("malformed owner \"" + o + "\": want 32 lowercase hex digits, not all zero");
        }
        return o;
    }

    /** Checks a resource manager's name (the branch qualifier). */
    public static void validateRmName(String rm) {
        if (rm == null || !RM_NAME.matcher(rm).matches()) {
            throw new IllegalArgumentException("malformed resource manager name \"" + rm
                    + "\": want 1 to 32 characters of a-z, 0-9, '_' or '-' (not first), as in the coordinator's --rm");
        }
    }

    /**
     * Reads a foreign {@link Xid} as Tandem's (any of the four formats), or
     * returns null when it is not in Tandem's format or is malformed: the Go
     * package's {@code ParseMySQLXID}.
     */
    public static TandemXid from(Xid x) {
        if (x instanceof TandemXid t) {
            return t;
        }
        if (x == null) {
            return null;
        }
        int f = x.getFormatId();
        boolean cp = f == COMMIT_POINT_FORMAT_ID || f == OWNED_COMMIT_POINT_FORMAT_ID;
        boolean owned = f == OWNED_FORMAT_ID || f == OWNED_COMMIT_POINT_FORMAT_ID;
        if (!cp && !owned && f != FORMAT_ID) {
            return null;
        }
        try {
            String g = new String(x.getGlobalTransactionId(), StandardCharsets.US_ASCII);
            String bq = new String(x.getBranchQualifier(), StandardCharsets.US_ASCII);
            if (g.length() < 32 || !cp && g.length() != 32) {
                return null;
            }
            String owner = null;
            if (owned) {
                if (bq.length() < 33) {
                    return null;
                }
                owner = checkOwner(bq.substring(0, 32));
                bq = bq.substring(32);
            }
            TandemXid t = of(g.substring(0, 32), bq);
            return cp ? t.withCommitPoint(g.substring(32), owner) : t.ownedBy(owner);
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

    /** The owner's id (the coordinator's cluster, or the commit point's decision table), or null for a legacy name. */
    public String owner() {
        return owner;
    }

    /** The prepared transaction's GID on PostgreSQL (see the class comment). */
    public String postgresGid() {
        if (commitPoint != null && owner != null) {
            return OWNED_COMMIT_POINT_PREFIX + gtrid + ":" + rm + ":" + commitPoint + ":" + owner;
        }
        if (commitPoint != null) {
            return POSTGRES_COMMIT_POINT_PREFIX + gtrid + ":" + rm + ":" + commitPoint;
        }
        if (owner != null) {
            return OWNED_PREFIX + gtrid + ":" + rm + ":" + owner;
        }
        return POSTGRES_PREFIX + gtrid + ":" + rm;
    }

    /** The XID as written in MariaDB's XA statements: {@code 'gtrid','bqual',formatID} (see the class comment). */
    public String mysqlXid() {
        return "'" + new String(getGlobalTransactionId(), StandardCharsets.US_ASCII) + "','"
                + new String(getBranchQualifier(), StandardCharsets.US_ASCII) + "'," + getFormatId();
    }

    @Override
    public int getFormatId() {
        if (commitPoint != null) {
            return owner != null ? OWNED_COMMIT_POINT_FORMAT_ID : COMMIT_POINT_FORMAT_ID;
        }
        return owner != null ? OWNED_FORMAT_ID : FORMAT_ID;
    }

    @Override
    public byte[] getGlobalTransactionId() {
        return (commitPoint != null ? gtrid + commitPoint : gtrid).getBytes(StandardCharsets.US_ASCII);
    }

    @Override
    public byte[] getBranchQualifier() {
        return (owner != null ? owner + rm : rm).getBytes(StandardCharsets.US_ASCII);
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
        return gtrid + ":" + rm + (commitPoint != null ? ":" + commitPoint : "") + (owner != null ? "@" + owner.substring(0, 8) : "");
    }
}
