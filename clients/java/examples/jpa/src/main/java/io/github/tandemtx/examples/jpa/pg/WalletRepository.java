package io.github.tandemtx.examples.jpa.pg;

import org.springframework.data.jpa.repository.JpaRepository;

/** Wallets, through the "pg" persistence unit (PersistenceUnits.PgRepositories). */
public interface WalletRepository extends JpaRepository<Wallet, Long> {
}
