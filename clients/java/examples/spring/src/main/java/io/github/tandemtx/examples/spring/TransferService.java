package io.github.tandemtx.examples.spring;

import javax.sql.DataSource;
import org.springframework.beans.factory.annotation.Qualifier;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.stereotype.Service;
import org.springframework.transaction.annotation.Transactional;

/**
 * Moves money from an account on PostgreSQL to one on MariaDB and journals
 * it on both sides, in one @Transactional method: Spring begins a JTA
 * transaction through Tandem, each JdbcTemplate's connection joins it, and
 * the commit is Tandem's two-phase commit (or a rollback of both sides when
 * the method throws).
 */
@Service
public class TransferService {
    /** The source account has too little: the transfer rolls back on both databases. */
    public static final class InsufficientFunds extends RuntimeException {
        InsufficientFunds(int account, long amount) {
            super("account pg:" + account + " cannot pay " + amount);
        }
    }

    /** Thrown on purpose after both databases were written: proves the rollback reaches both. */
    public static final class FailedOnPurpose extends RuntimeException {
        FailedOnPurpose(String ref) {
            super("transfer " + ref + " failed on purpose after writing both databases");
        }
    }

    private final JdbcTemplate pg;
    private final JdbcTemplate maria;

    public TransferService(@Qualifier("pg") DataSource pg, @Qualifier("maria") DataSource maria) {
        this.pg = new JdbcTemplate(pg);
        this.maria = new JdbcTemplate(maria);
    }

    /**
     * Debits pg account {@code from}, credits maria account {@code to}, and
     * journals {@code ref} on both; with {@code failAtEnd}, throws after all
     * of it, so nothing of it may stay.
     */
    @Transactional
    public void transfer(String ref, int from, int to, long amount, boolean failAtEnd) {
        if (pg.update("UPDATE " + Bank.ACCOUNTS + " SET balance = balance - ? WHERE id = ? AND balance >= ?", amount, from, amount) != 1) {
            throw new InsufficientFunds(from, amount);
        }
        maria.update("UPDATE " + Bank.ACCOUNTS + " SET balance = balance + ? WHERE id = ?", amount, to);
        pg.update("INSERT INTO " + Bank.JOURNAL + " (ref, amount) VALUES (?, ?)", ref, amount);
        maria.update("INSERT INTO " + Bank.JOURNAL + " (ref, amount) VALUES (?, ?)", ref, amount);
        if (failAtEnd) {
            throw new FailedOnPurpose(ref);
        }
    }
}
