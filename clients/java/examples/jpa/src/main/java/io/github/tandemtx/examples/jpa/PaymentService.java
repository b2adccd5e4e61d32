package io.github.tandemtx.examples.jpa;

import io.github.tandemtx.examples.jpa.maria.Payment;
import io.github.tandemtx.examples.jpa.maria.PaymentRepository;
import io.github.tandemtx.examples.jpa.pg.Wallet;
import io.github.tandemtx.examples.jpa.pg.WalletRepository;
import org.springframework.stereotype.Service;
import org.springframework.transaction.annotation.Transactional;

/**
 * Pays from a wallet (PostgreSQL) and records the payment (MariaDB) in one
 * @Transactional method: both persistence units join the JTA transaction
 * Spring began on Tandem; Hibernate flushes both before Tandem's commit,
 * which commits both databases or neither.
 */
@Service
public class PaymentService {
    /** The wallet has too little: nothing is written. */
    public static final class InsufficientFunds extends RuntimeException {
        private static final long serialVersionUID = 1L;

        InsufficientFunds(long wallet, long amount) {
            super("wallet " + wallet + " cannot pay " + amount);
        }
    }

    /** Thrown on purpose after both entities were changed: the rollback must reach both databases. */
    public static final class FailedOnPurpose extends RuntimeException {
        private static final long serialVersionUID = 1L;

        FailedOnPurpose(String ref) {
            super("payment " + ref + " failed on purpose after changing both databases");
        }
    }

    private final WalletRepository wallets;
    private final PaymentRepository payments;

    public PaymentService(WalletRepository wallets, PaymentRepository payments) {
        this.wallets = wallets;
        this.payments = payments;
    }

    /** Opens a wallet (PostgreSQL only). */
    @Transactional
    public void open(long id, String owner, long balance) {
        wallets.save(new Wallet(id, owner, balance));
    }

    /**
     * Debits wallet walletId by amount and records payment ref; with
     * failAtEnd, throws after both, so neither may stay. A ref already
     * recorded fails the commit (MariaDB's duplicate key at the flush): the
     * debit is rolled back with it.
     */
    @Transactional
    public void pay(String ref, long walletId, long amount, boolean failAtEnd) {
        Wallet w = wallets.findById(walletId).orElseThrow(() -> new IllegalArgumentException("no wallet " + walletId));
        if (w.getBalance() < amount) {
            throw new InsufficientFunds(walletId, amount);
        }
        w.debit(amount);
        payments.save(new Payment(ref, walletId, amount));
        if (failAtEnd) {
            throw new FailedOnPurpose(ref);
        }
    }

    /** The wallet's balance now (outside any transaction: PostgreSQL's committed state). */
    public long balance(long walletId) {
        return wallets.findById(walletId).orElseThrow().getBalance();
    }

    /** Whether payment ref is recorded (MariaDB's committed state). */
    public boolean recorded(String ref) {
        return payments.existsById(ref);
    }

    /** What wallet walletId has paid, by MariaDB's records. */
    public long totalPaid(long walletId) {
        return payments.totalPaidFrom(walletId);
    }
}
