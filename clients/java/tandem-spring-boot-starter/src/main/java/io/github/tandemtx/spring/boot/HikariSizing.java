package io.github.tandemtx.spring.boot;

import com.zaxxer.hikari.HikariDataSource;
import java.sql.SQLException;
import java.time.Duration;
import javax.sql.DataSource;

/**
 * What a HikariCP source says (loaded only when HikariCP is on the class
 * path): its size and timeout, from which its TandemDataSource is sized, and
 * the database behind it.
 */
final class HikariSizing {
    /** HikariCP's maximumPoolSize when none is set (HikariConfig.DEFAULT_POOL_SIZE, private). */
    static final int HIKARI_DEFAULT_POOL_SIZE = 10;

    private HikariSizing() {}

    /** The pool ds is, or wraps; null when it is no HikariCP pool. */
    private static HikariDataSource hikari(DataSource ds) {
        if (ds instanceof HikariDataSource h) {
            return h;
        }
        try {
            return ds.isWrapperFor(HikariDataSource.class) ? ds.unwrap(HikariDataSource.class) : null;
        } catch (SQLException | RuntimeException e) {
            return null;
        }
    }

    /**
     * A TandemDataSource over Hikari: one connection less than Hikari's
     * maximumPoolSize (at least one), the one left for the transaction
     * manager's own short connections, which take no TandemDataSource
     * permit (README, "Pools"); a wait as long as Hikari's connectionTimeout.
     * Null when ds is no HikariCP pool.
     */
    static TandemDataSourcePostProcessor.Sizing of(DataSource ds) {
        HikariDataSource h = hikari(ds);
        if (h == null) {
            return null;
        }
        // Unset (Boot's DataSourceBuilder leaves it so): -1, which Hikari makes 10 when its pool starts.
        int max = h.getMaximumPoolSize() < 1 ? HIKARI_DEFAULT_POOL_SIZE : h.getMaximumPoolSize();
        return new TandemDataSourcePostProcessor.Sizing(max, Math.max(1, max - 1), Duration.ofMillis(h.getConnectionTimeout()));
    }

    /** The database from Hikari's JDBC URL, driver class, or data source (class or object); null when none says. */
    static TandemProperties.Kind kind(DataSource ds) {
        HikariDataSource h = hikari(ds);
        if (h == null) {
            return null;
        }
        TandemProperties.Kind k = TandemDataSourcePostProcessor.kindOfName(h.getJdbcUrl());
        if (k == null) {
            k = TandemDataSourcePostProcessor.kindOfName(h.getDriverClassName());
        }
        if (k == null) {
            k = TandemDataSourcePostProcessor.kindOfName(h.getDataSourceClassName());
        }
        if (k == null && h.getDataSource() != null) {
            k = TandemDataSourcePostProcessor.kindOfName(h.getDataSource().getClass().getName());
        }
        return k;
    }
}
