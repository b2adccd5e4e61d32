package io.github.tandemtx.examples.jpa.pg;

import jakarta.persistence.Column;
import jakarta.persistence.Entity;
import jakarta.persistence.Id;
import jakarta.persistence.Table;
import jakarta.persistence.Version;

/** A wallet, in PostgreSQL (persistence unit "pg"). */
@Entity
@Table(name = "tandem_jpa_wallet")
public class Wallet {
    @Id
    private Long id;

    @Column(nullable = false, length = 64)
    private String owner;

    @Column(nullable = false)
    private long balance;

    /** Optimistic locking: two payments from one wallet at once cannot both debit the balance they read. */
    @Version
    private Long version;

    protected Wallet() {
    }

    public Wallet(long id, String owner, long balance) {
        this.id = id;
        this.owner = owner;
        this.balance = balance;
    }

    public Long getId() {
        return id;
    }

    public String getOwner() {
        return owner;
    }

    public long getBalance() {
        return balance;
    }

    /** Takes amount from the balance (written to PostgreSQL when Hibernate flushes, at the latest before the commit). */
    public void debit(long amount) {
        balance -= amount;
    }
}
