package io.github.tandemtx.jta;

import jakarta.transaction.Status;
import jakarta.transaction.Synchronization;
import jakarta.transaction.TransactionSynchronizationRegistry;

/** The {@link TransactionSynchronizationRegistry} of a {@link TandemTransactionManager}: it acts on the calling thread's transaction. */
final class TandemSynchronizationRegistry implements TransactionSynchronizationRegistry {
    private final TandemTransactionManager tm;

    TandemSynchronizationRegistry(TandemTransactionManager tm) {
        this.tm = tm;
    }

    private TandemTransaction require(String what) {
        TandemTransaction tx = tm.current();
        if (tx == null) {
            throw new IllegalStateException("tandem: " + what + ": no transaction on this thread");
        }
        return tx;
    }

    @Override
    public Object getTransactionKey() {
        return tm.current();
    }

    @Override
    public void putResource(Object key, Object value) {
        if (key == null) {
            throw new NullPointerException("tandem: putResource: null key");
        }
        TandemTransaction tx = require("putResource");
        if (value == null) {
            tx.resources().remove(key);
        } else {
            tx.resources().put(key, value);
        }
    }

    @Override
    public Object getResource(Object key) {
        if (key == null) {
            throw new NullPointerException("tandem: getResource: null key");
        }
        return require("getResource").resources().get(key);
    }

    @Override
    public void registerInterposedSynchronization(Synchronization sync) {
        require("registerInterposedSynchronization").registerInterposed(sync);
    }

    @Override
    public int getTransactionStatus() {
        TandemTransaction tx = tm.current();
        return tx == null ? Status.STATUS_NO_TRANSACTION : tx.getStatus();
    }

    @Override
    public void setRollbackOnly() {
        require("setRollbackOnly").setRollbackOnly();
    }

    @Override
    public boolean getRollbackOnly() {
        return require("getRollbackOnly").rollbackOnly();
    }
}
