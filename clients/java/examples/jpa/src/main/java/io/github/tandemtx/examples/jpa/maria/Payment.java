package io.github.tandemtx.examples.jpa.maria;

import jakarta.persistence.Column;
import jakarta.persistence.Entity;
import jakarta.persistence.Id;
import jakarta.persistence.Table;
import jakarta.persistence.Version;

/** A payment made from a wallet, in MariaDB (persistence unit "maria"); its reference is the caller's. */
@Entity
@Table(name = "tandem_jpa_payment")
public class Payment {
    @Id
    @Column(length = 36)
    private String ref;

    @Column(name = "wallet_id", nullable = false)
    private long walletId;

    @Column(nullable = false)
    private long amount;

    /** Null until persisted: Spring Data's save() persists a new payment rather than merging it. */
    @Version
    private Long version;

    protected Payment() {
    }

    public Payment(String ref, long walletId, long amount) {
        this.ref = ref;
        this.walletId = walletId;
        this.amount = amount;
    }

    public String getRef() {
        return ref;
    }

    public long getWalletId() {
        return walletId;
    }

    public long getAmount() {
        return amount;
    }
}
