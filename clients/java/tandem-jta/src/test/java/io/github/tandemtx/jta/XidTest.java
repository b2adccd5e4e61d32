package io.github.tandemtx.jta;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import javax.sql.XAConnection;
import javax.transaction.xa.XAResource;
import org.junit.jupiter.api.Test;

/** Tandem's XID format, as the Go package xid writes it. */
class XidTest {
    @Test
    void gtridFormat() {
        long before = System.currentTimeMillis();
        String g = TandemXid.newGtrid();
        assertTrue(g.matches("[0-9a-f]{32}"), g);
        assertEquals("0000", g.substring(0, 4), "shard prefix 0");
        long ms = Long.parseLong(g.substring(4, 16), 16);
        assertTrue(ms >= before && ms <= System.currentTimeMillis(), "milliseconds since the epoch: " + ms);
        assertNotEquals(g, TandemXid.newGtrid());
    }

    @Test
    void names() {
        TandemXid x = TandemXid.of("0000019a8f3c2b1e5d0c7a9b3e41f2aa", "pg");
        assertEquals("tandem:0000019a8f3c2b1e5d0c7a9b3e41f2aa:pg", x.postgresGid());
        assertEquals("'0000019a8f3c2b1e5d0c7a9b3e41f2aa','pg',1413566020", x.mysqlXid());
        assertEquals(0x54414E44, x.getFormatId());
        assertEquals("pg", new String(x.getBranchQualifier(), StandardCharsets.US_ASCII));
        assertEquals(x, TandemXid.from(x));
        assertThrows(IllegalArgumentException.class, () -> TandemXid.of("0000019A8F3C2B1E5D0C7A9B3E41F2AA", "pg"));
        assertThrows(IllegalArgumentException.class, () -> TandemXid.of("00000000000000000000000000000000", "pg"));
        assertThrows(IllegalArgumentException.class, () -> TandemXid.of("0000019a8f3c2b1e5d0c7a9b3e41f2aa", "_pg"));
        assertThrows(IllegalArgumentException.class, () -> TandemXid.of("0000019a8f3c2b1e5d0c7a9b3e41f2aa", "PG"));
        assertThrows(IllegalArgumentException.class, () -> TandemXid.of("0000019a8f3c2b1e5d0c7a9b3e41f2aa", "a".repeat(33)));
        assertNull(TandemXid.from(new javax.transaction.xa.Xid() {
            public int getFormatId() {
                return 1;
            }

            public byte[] getGlobalTransactionId() {
                return new byte[0];
            }

            public byte[] getBranchQualifier() {
                return new byte[0];
            }
        }));
    }

    /**
     * A branch decided by a commit point carries its name exactly as the Go
     * package xid writes it (tandemcp:g:rm:cp; format TANC with cp appended to
     * the gtrid), and reads back.
     */
    @Test
    void commitPointNamesMatchTheGoSdk() {
        String g = "0000019a8f3c2b1e5d0c7a9b3e41f2aa";
        TandemXid x = TandemXid.of(g, "pg").withCommitPoint("maria", null);
        assertEquals("tandemcp:0000019a8f3c2b1e5d0c7a9b3e41f2aa:pg:maria", x.postgresGid());
        assertEquals("'0000019a8f3c2b1e5d0c7a9b3e41f2aamaria','pg',1413566019", x.mysqlXid());
        assertEquals(0x54414E43, x.getFormatId());
        assertEquals("maria", x.commitPoint());
        TandemXid back = TandemXid.from(new javax.transaction.xa.Xid() {
            public int getFormatId() {
                return 0x54414E43;
            }

            public byte[] getGlobalTransactionId() {
                return (g + "maria").getBytes(java.nio.charset.StandardCharsets.US_ASCII);
            }

            public byte[] getBranchQualifier() {
                return "pg".getBytes(java.nio.charset.StandardCharsets.US_ASCII);
            }
        });
        assertEquals(x, back);
        assertEquals("maria", back.commitPoint());
        assertEquals("tandem:" + g + ":pg", TandemXid.of(g, "pg").postgresGid(), "no commit point: the coordinator's name");
        assertFalse(x.equals(TandemXid.of(g, "pg")), "a commit point's branch is another XID");
    }

    /**
     * Owned names, exactly as the Go package xid writes them (printed by
     * xid's Branch.PostgresGID and MySQLXID for this gtrid and owner), and
     * read back from their XA parts.
     */
    @Test
    void ownedNamesMatchTheGoSdk() {
        String g = "0000019a8f3c2b1e5d0c7a9b3e41f2aa";
        String o = "6f1c2d3e4f5061728394a5b6c7d8e9f0";
        TandemXid coord = TandemXid.of(g, "pg").ownedBy(o);
        TandemXid cp = TandemXid.of(g, "pg").withCommitPoint("maria", o);
        TandemXid self = TandemXid.commitPointSelf(g, "maria", o);
        TandemXid mcoord = TandemXid.of(g, "maria").ownedBy(o);
        assertEquals("tandem2:0000019a8f3c2b1e5d0c7a9b3e41f2aa:pg:6f1c2d3e4f5061728394a5b6c7d8e9f0", coord.postgresGid());
        assertEquals("'0000019a8f3c2b1e5d0c7a9b3e41f2aa','6f1c2d3e4f5061728394a5b6c7d8e9f0pg',1413566002", coord.mysqlXid());
        assertEquals("tandemcp2:0000019a8f3c2b1e5d0c7a9b3e41f2aa:pg:maria:6f1c2d3e4f5061728394a5b6c7d8e9f0", cp.postgresGid());
        assertEquals("'0000019a8f3c2b1e5d0c7a9b3e41f2aamaria','6f1c2d3e4f5061728394a5b6c7d8e9f0pg',1413563186", cp.mysqlXid());
        assertEquals("tandemcp2:0000019a8f3c2b1e5d0c7a9b3e41f2aa:maria:maria:6f1c2d3e4f5061728394a5b6c7d8e9f0", self.postgresGid());
        assertEquals("'0000019a8f3c2b1e5d0c7a9b3e41f2aamaria','6f1c2d3e4f5061728394a5b6c7d8e9f0maria',1413563186", self.mysqlXid());
        assertEquals("'0000019a8f3c2b1e5d0c7a9b3e41f2aa','6f1c2d3e4f5061728394a5b6c7d8e9f0maria',1413566002", mcoord.mysqlXid());
        assertEquals(0x54414E32, TandemXid.OWNED_FORMAT_ID);
        assertEquals(0x54414332, TandemXid.OWNED_COMMIT_POINT_FORMAT_ID);
        for (TandemXid x : new TandemXid[] {coord, cp, self, mcoord}) {
            TandemXid back = TandemXid.from(xid(x.getFormatId(), x.getGlobalTransactionId(), x.getBranchQualifier()));
            assertEquals(x, back);
            assertEquals(o, back.owner());
            assertEquals(x.commitPoint(), back.commitPoint());
            assertEquals(x.rm(), back.rm());
        }
        assertFalse(coord.equals(TandemXid.of(g, "pg")), "an owned name is another XID than the legacy one");
        // Forgeries the Go parser refuses: no owner, a short one, the zero one, upper case.
        byte[] gb = g.getBytes(StandardCharsets.US_ASCII);
        assertNull(TandemXid.from(xid(TandemXid.OWNED_FORMAT_ID, gb, "pg".getBytes(StandardCharsets.US_ASCII))));
        assertNull(TandemXid.from(xid(TandemXid.OWNED_FORMAT_ID, gb, (o.substring(0, 31) + "pg").getBytes(StandardCharsets.US_ASCII))));
        assertNull(TandemXid.from(xid(TandemXid.OWNED_FORMAT_ID, gb, ("0".repeat(32) + "pg").getBytes(StandardCharsets.US_ASCII))));
        assertNull(TandemXid.from(xid(TandemXid.OWNED_FORMAT_ID, gb, (o.toUpperCase() + "pg").getBytes(StandardCharsets.US_ASCII))));
        assertThrows(IllegalArgumentException.class, () -> TandemXid.of(g, "pg").ownedBy("0".repeat(32)));
    }

    static javax.transaction.xa.Xid xid(int format, byte[] gtrid, byte[] bqual) {
        return new javax.transaction.xa.Xid() {
            public int getFormatId() {
                return format;
            }

            public byte[] getGlobalTransactionId() {
                return gtrid;
            }

            public byte[] getBranchQualifier() {
                return bqual;
            }
        };
    }

    /** With allowMultiQueries, the error of the second statement of a multi-statement is thrown, not lost. */
    @Test
    void multiStatementErrorsAreThrown() throws Exception {
        try (java.sql.Connection c = TestEnv.mariaSource().getConnection()) {
            MariaDbBranch b = new MariaDbBranch(new ResourceManager("maria", DecisionTable.Dialect.MARIADB, null), c, x -> { });
            java.sql.SQLException e = assertThrows(java.sql.SQLException.class, () -> b.steps("DO 1", "SELECT * FROM jta_no_such_table"));
            assertTrue(e.getMessage().contains("jta_no_such_table"), e.getMessage());
            assertEquals(Boolean.TRUE, b.multi, "one round trip: the tests' MariaDB URL has allowMultiQueries");
            b.steps("DO 1", "DO 2"); // and a good one passes
        }
    }

    /**
     * MariaDB Connector/J's own XAResource, given a TandemXid, prepares a
     * branch that XA RECOVER lists exactly as the coordinator's scan expects
     * (format 1413566002, gtrid 32 characters, bqual the owner and the RM name). Tandem still
     * drives MariaDB with SQL so that it can close the session on an unknown
     * outcome; this checks the two namings agree.
     */
    @Test
    void connectorJXaResourceNamesBranchesTheSame() throws Exception {
        String owner = "6f1c2d3e4f5061728394a5b6c7d8e9f0";
        TandemXid x = TandemXid.of(TandemXid.newGtrid(), "maria").ownedBy(owner);
        XAConnection xc = TestEnv.mariaSource().getXAConnection();
        try {
            XAResource r = xc.getXAResource();
            r.start(x, XAResource.TMNOFLAGS);
            try (Statement st = xc.getConnection().createStatement()) {
                st.execute("SELECT 1");
            }
            r.end(x, XAResource.TMSUCCESS);
            r.prepare(x);
            boolean found = false;
            try (Connection c = TestEnv.maria(); Statement st = c.createStatement(); ResultSet rs = st.executeQuery("XA RECOVER")) {
                while (rs.next()) {
                    if (rs.getString("data").equals(x.gtrid() + owner + "maria")) {
                        found = true;
                        assertEquals(TandemXid.OWNED_FORMAT_ID, rs.getLong("formatID"));
                        assertEquals(32, rs.getInt("gtrid_length"));
                        assertEquals(37, rs.getInt("bqual_length"));
                    }
                }
            }
            assertTrue(found, "XA RECOVER lists " + x.mysqlXid());
            r.rollback(x);
        } finally {
            xc.close();
        }
    }
}
