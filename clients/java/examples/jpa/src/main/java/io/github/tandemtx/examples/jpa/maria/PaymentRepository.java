package io.github.tandemtx.examples.jpa.maria;

import org.springframework.data.jpa.repository.JpaRepository;
import org.springframework.data.jpa.repository.Query;

/** Payments, through the "maria" persistence unit (PersistenceUnits.MariaRepositories). */
public interface PaymentRepository extends JpaRepository<Payment, String> {
    /** What wallet walletId has paid in all. */
    @Query("SELECT coalesce(sum(p.amount), 0) FROM Payment p WHERE p.walletId = ?1")
    long totalPaidFrom(long walletId);
}
