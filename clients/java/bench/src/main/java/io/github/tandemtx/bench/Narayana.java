package io.github.tandemtx.bench;

import com.arjuna.ats.arjuna.common.ObjectStoreEnvironmentBean;
import com.arjuna.ats.arjuna.coordinator.TxControl;
import com.arjuna.ats.arjuna.objectstore.StoreManager;
import com.arjuna.ats.internal.arjuna.objectstore.hornetq.HornetqJournalEnvironmentBean;
import com.arjuna.ats.internal.arjuna.objectstore.hornetq.HornetqObjectStoreAdaptor;
import com.arjuna.common.internal.util.propertyservice.BeanPopulator;
import jakarta.transaction.Status;
import jakarta.transaction.Transaction;
import jakarta.transaction.TransactionManager;
import java.io.PrintStream;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.PreparedStatement;
import javax.sql.XAConnection;
import javax.transaction.xa.XAResource;

/**
 * narayana: the same inserts as one JTA transaction through Narayana
 * (narayana-jta, standalone: {@code com.arjuna.ats.jta.TransactionManager}),
 * with its defaults: its default object store, the file store
 * (ShadowNoFileLockStore, every write synced), prepares and commits one
 * resource after the other on the calling thread. Each thread keeps its own
 * XA connections (pgjdbc's PGXADataSource, MariaDB Connector/J's
 * MariaDbDataSource) and enlists their XAResources in every transaction, as
 * an application without a pool does: narayana-jta has no JDBC pool of its
 * own. Two writers, so a two-phase commit: start both branches, the inserts,
 * end and prepare each, write the transaction's log record, commit each,
 * remove the record.
 *
 * <p>narayana-journal is the same with Narayana's journal object store
 * (HornetqObjectStoreAdaptor over ActiveMQ Artemis's journal, its defaults:
 * synced writes, AIO where libaio loads, else NIO). Narayana's configuration
 * and store are static, one per JVM: the two variants cannot be in one run.
 *
 * <p>The store is a directory of its own ({@code .tandem-bench-narayana-*}
 * under --dir), made before the transaction manager is first used.
 */
final class Narayana implements Workload {
    /**
     * Its INFO lines (start, stop, recovery passes; none per transaction)
     * would fill stderr: warnings only. Held here, as java.util.logging keeps
     * loggers weakly.
     */
    private static final java.util.logging.Logger QUIET = java.util.logging.Logger.getLogger("com.arjuna");

    private final String name;
    private final Databases db;
    private final TransactionManager tm;
    private final TmDir dir;

    private Narayana(String name, Databases db, TransactionManager tm, TmDir dir) {
        this.name = name;
        this.db = db;
        this.tm = tm;
        this.dir = dir;
    }

    /** Points Narayana's object store at a new directory under {@code parent} and starts its transaction manager. */
    static Workload workload(String name, Databases db, Path parent, PrintStream log) throws Main.Fatal {
        QUIET.setLevel(java.util.logging.Level.WARNING);
        TmDir dir = TmDir.create(parent, name, log);
        try {
            boolean journal = name.equals("narayana-journal");
            String store = dir.path().resolve("ObjectStore").toString();
            // The default instance is the transaction log's store; the two named ones are Narayana's others
            // (its TransactionStatusManager keeps a record in the communicationStore). A journal store takes
            // its own settings from the HornetqJournalEnvironmentBean of the same name, one directory each.
            for (String instance : new String[] {null, "communicationStore", "stateStore"}) {
                ObjectStoreEnvironmentBean b = instance == null
                        ? BeanPopulator.getDefaultInstance(ObjectStoreEnvironmentBean.class)
                        : BeanPopulator.getNamedInstance(ObjectStoreEnvironmentBean.class, instance);
                b.setObjectStoreDir(store);
                if (journal) {
                    b.setObjectStoreType(HornetqObjectStoreAdaptor.class.getName());
                    HornetqJournalEnvironmentBean j = instance == null
                            ? BeanPopulator.getDefaultInstance(HornetqJournalEnvironmentBean.class)
                            : BeanPopulator.getNamedInstance(HornetqJournalEnvironmentBean.class, instance);
                    j.setStoreDir(dir.path().resolve("journal-" + (instance == null ? "default" : instance)).toString());
                }
            }
            if (journal) {
                log.println("bench: " + name + ": Artemis journal over "
                        + (org.apache.activemq.artemis.core.io.aio.AIOSequentialFileFactory.isSupported() ? "AIO (libaio)" : "NIO (libaio not loadable)"));
            }
            if (!TxControl.isEnabled()) {
                TxControl.enable(); // an earlier run in this JVM (a test) closed it
            }
            TransactionManager tm = com.arjuna.ats.jta.TransactionManager.transactionManager();
            return new Narayana(name, db, tm, dir);
        } catch (RuntimeException | LinkageError e) {
            dir.close();
            throw new Main.Fatal(name + ": cannot start Narayana: " + Main.describe(e), e);
        }
    }

    @Override
    public String name() {
        return name;
    }

    @Override
    public String summary() {
        return name.equals("narayana-journal")
                ? "the same inserts as one JTA transaction through Narayana, its journal object store (Artemis journal)"
                : "the same inserts as one JTA transaction through Narayana, its defaults (file object store)";
    }

    @Override
    public Worker open(int t, Side side) throws Exception {
        W w = new W();
        w.connect();
        return w;
    }

    private final class W implements Worker {
        private XAConnection pgX, mariaX;
        private Connection pg, maria;
        private XAResource pgXA, mariaXA;
        private PreparedStatement pgIns, mariaIns;

        void connect() throws Exception {
            close();
            pgX = db.pgXA();
            pg = pgX.getConnection();
            pgXA = pgX.getXAResource();
            pgIns = pg.prepareStatement(INSERT);
            mariaX = db.mariaXA();
            maria = mariaX.getConnection();
            mariaXA = mariaX.getXAResource();
            mariaIns = maria.prepareStatement(INSERT);
        }

        @Override
        public void txn(long id) throws Exception {
            String v = Workload.value(id);
            tm.begin();
            try {
                Transaction tx = tm.getTransaction();
                tx.enlistResource(pgXA);
                pgIns.setLong(1, id);
                pgIns.setString(2, v);
                pgIns.executeUpdate();
                tx.enlistResource(mariaXA);
                mariaIns.setLong(1, id);
                mariaIns.setString(2, v);
                mariaIns.executeUpdate();
            } catch (Exception e) {
                tm.rollback();
                throw e;
            }
            tm.commit();
        }

        @Override
        public void recover() throws Exception {
            if (tm.getStatus() != Status.STATUS_NO_TRANSACTION) {
                try {
                    tm.rollback();
                } catch (Exception e) {
                    tm.suspend(); // let go of it: the thread must be free for the next one
                }
            }
            if (!pg.isValid(2) || !maria.isValid(2)) {
                connect();
            }
        }

        @Override
        public void close() {
            Util.closeQuietly(pg, maria);
            Util.closeQuietly(pgX, mariaX);
        }
    }

    /**
     * Stops Narayana taking transactions (waiting for active ones; this also
     * stops its TransactionStatusManager, which keeps a record in the store),
     * closes its stores (the journal's files) and removes their directory.
     */
    @Override
    public void close() {
        try {
            TxControl.disable(true);
            StoreManager.shutdown();
        } finally {
            dir.close();
        }
    }
}
