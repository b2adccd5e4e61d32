package io.github.tandemtx.spring.boot;

import io.github.tandemtx.jta.TandemDataSource;
import io.github.tandemtx.jta.TandemTransactionManager;
import io.github.tandemtx.jta.TandemXid;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.logging.Level;
import java.util.logging.Logger;
import javax.sql.DataSource;
import org.springframework.beans.BeansException;
import org.springframework.beans.factory.BeanFactory;
import org.springframework.beans.factory.BeanFactoryAware;
import org.springframework.beans.factory.config.ConfigurableBeanFactory;
import org.springframework.beans.factory.config.DestructionAwareBeanPostProcessor;
import org.springframework.core.Ordered;
import org.springframework.util.ClassUtils;

/**
 * Makes every DataSource bean of the application an enlisting
 * {@link TandemDataSource} over it (connections taken inside a JTA
 * transaction join it), named by {@code tandem.datasources.BEAN.rm} or the
 * bean's name, and sized with its source: over a HikariCP pool, its pool
 * size is Hikari's {@code maximumPoolSize} less one (at least one) and its
 * wait Hikari's {@code connectionTimeout} (README, "Pools"). Not wrapped: a
 * bean that already is a TandemDataSource (or wraps one), or one with
 * {@code tandem.datasources.BEAN.enabled=false}. Two beans named as one
 * resource manager stop the application ({@link InvalidTandemSettingException}
 * naming both and {@code tandem.datasources.BEAN.rm}): a transaction's
 * connections of the second would join the first one's branch, on the
 * first one's database.
 *
 * <p>The bean named BEAN is then the TandemDataSource: inject it as a
 * {@code DataSource} ({@code unwrap(HikariDataSource.class)} reaches the
 * pool). On shutdown, before the transaction manager, the TandemDataSource
 * is closed (it refuses new connections; the idle sessions it keeps over a
 * source that does not pool are closed; its RM name is free again), then
 * Spring destroys the bean under it as it would without the starter: a
 * HikariCP pool's {@code close()} (inferred for a {@code @Bean}), nothing
 * with {@code @Bean(destroyMethod = "")}. The source is never closed here:
 * Spring registers a bean's destruction for the object it created, the
 * source, whose own destroy method then runs once.
 */
public class TandemDataSourcePostProcessor implements DestructionAwareBeanPostProcessor, BeanFactoryAware, Ordered {
    private static final Logger LOG = Logger.getLogger(TandemDataSourcePostProcessor.class.getName());
    private static final boolean HIKARI = ClassUtils.isPresent("com.zaxxer.hikari.HikariDataSource", TandemDataSourcePostProcessor.class.getClassLoader());

    private ConfigurableBeanFactory beanFactory;
    /**
     * The TandemDataSources made here, by the bean each wraps (by identity):
     * Spring asks {@link #requiresDestruction} and calls
     * {@link #postProcessBeforeDestruction} with that bean, the object it
     * created, not with the wrapper this post-processor returned.
     */
    private final Map<Object, TandemDataSource> made = Collections.synchronizedMap(new IdentityHashMap<>());
    /** The resource manager names given to DataSource beans here: the bean's name, and whether tandem.datasources.BEAN.rm set it. */
    private final Map<String, Named> rms = new ConcurrentHashMap<>();

    /** A DataSource bean named as resource manager rm here. */
    private record Named(String beanName, boolean explicit) {
        String how(String rm) {
            return explicit ? "tandem.datasources." + beanName + ".rm=" + rm : "its bean name";
        }
    }

    @Override
    public void setBeanFactory(BeanFactory beanFactory) {
        this.beanFactory = (ConfigurableBeanFactory) beanFactory;
    }

    /** After the pool's own properties are bound (Boot binds @ConfigurationProperties before initialization), so its size is known. */
    @Override
    public Object postProcessAfterInitialization(Object bean, String beanName) throws BeansException {
        if (!(bean instanceof DataSource ds) || bean instanceof TandemDataSource || wrapsTandem(ds)) {
            return bean;
        }
        TandemProperties props = beanFactory.getBean(TandemProperties.class);
        if (!props.isEnabled()) {
            return bean;
        }
        TandemProperties.DataSourceProperties p = props.dataSource(beanName);
        if (!p.isEnabled()) {
            return bean;
        }
        String rm = p.getRm() != null ? p.getRm() : beanName;
        try {
            TandemXid.validateRmName(rm);
        } catch (IllegalArgumentException e) {
            throw new InvalidTandemSettingException("tandem.datasources." + beanName + ".rm", "DataSource bean '" + beanName
                    + "' is named as its resource manager, but '" + rm + "' is not a resource manager name (1 to 32 of a-z, 0-9, '_', '-' not first): "
                    + "set tandem.datasources." + beanName + ".rm to its name in the coordinator's --rm NAME=…");
        }
        Named mine = new Named(beanName, p.getRm() != null);
        Named had = rms.putIfAbsent(rm, mine);
        if (had != null) {
            throw new InvalidTandemSettingException("tandem.datasources." + beanName + ".rm", "DataSource beans '" + had.beanName() + "' ("
                    + had.how(rm) + ") and '" + beanName + "' (" + mine.how(rm) + ") are both resource manager \"" + rm
                    + "\": a transaction's connections of '" + beanName + "' would join the branch of '" + had.beanName() + "' and write to its database. "
                    + "Set tandem.datasources." + beanName + ".rm (or tandem.datasources." + had.beanName() + ".rm) so that each names its own "
                    + "database's resource manager, as the coordinator's --rm NAME=… does; or leave one out with tandem.datasources.BEAN.enabled=false");
        }
        TandemProperties.Kind kind = p.getKind() != null ? p.getKind() : kind(beanName, ds);
        String tmName = tmBeanName();
        TandemTransactionManager tm = beanFactory.getBean(tmName, TandemTransactionManager.class);
        TandemDataSource t;
        try {
            t = kind == TandemProperties.Kind.POSTGRES ? TandemDataSource.postgres(tm, rm, ds) : TandemDataSource.mariadb(tm, rm, ds);
        } catch (IllegalStateException e) {
            // The application's own TandemDataSource bean has the name.
            throw new InvalidTandemSettingException("tandem.datasources." + beanName + ".rm", "DataSource bean '" + beanName + "' ("
                    + mine.how(rm) + ") cannot enlist as resource manager \"" + rm + "\": " + e.getMessage(), e);
        }
        Sizing s = HIKARI ? HikariSizing.of(ds) : null;
        if (s != null) {
            t.setSourcePools(true);
        }
        int max = p.getMaxPoolSize() != null ? p.getMaxPoolSize() : s != null ? s.maxPoolSize() : TandemDataSource.DEFAULT_MAX_POOL_SIZE;
        t.setMaxPoolSize(max);
        if (p.getAcquireTimeout() != null) {
            t.setAcquireTimeout(p.getAcquireTimeout());
        } else if (s != null) {
            t.setAcquireTimeout(s.acquireTimeout());
        }
        if (s != null && p.getMaxPoolSize() != null && max >= s.sourceMax()) {
            LOG.warning("tandem: DataSource '" + beanName + "': tandem.datasources." + beanName + ".max-pool-size=" + max
                    + " is not below HikariCP's maximum-pool-size " + s.sourceMax()
                    + ": a thread may wait in Hikari while the transaction manager's own connection (deleting decided rows) is out");
        }
        made.put(bean, t);
        // Destroyed before the transaction manager it registered with.
        beanFactory.registerDependentBean(tmName, beanName);
        LOG.fine(() -> "tandem: DataSource '" + beanName + "' enlists as resource manager \"" + rm + "\" (" + kind + ", pool " + max + ")");
        return t;
    }

    private String tmBeanName() {
        String[] names = ((org.springframework.beans.factory.ListableBeanFactory) beanFactory).getBeanNamesForType(TandemTransactionManager.class, false, false);
        if (names.length != 1) {
            throw new IllegalStateException("tandem: want one TandemTransactionManager bean for the DataSources to enlist with, found "
                    + (names.length == 0 ? "none" : String.join(", ", names)));
        }
        return names[0];
    }

    private static boolean wrapsTandem(DataSource ds) {
        try {
            return ds.isWrapperFor(TandemDataSource.class);
        } catch (SQLException | RuntimeException e) {
            return false;
        }
    }

    /**
     * The database behind ds: from HikariCP's URL, driver or data source
     * class, from ds's own class (pgjdbc's, MariaDB Connector/J's), else
     * from a connection's metadata.
     */
    static TandemProperties.Kind kind(String beanName, DataSource ds) {
        TandemProperties.Kind k = HIKARI ? HikariSizing.kind(ds) : null;
        if (k == null) {
            k = kindOfName(ds.getClass().getName());
        }
        if (k != null) {
            return k;
        }
        try (Connection c = ds.getConnection()) {
            String product = c.getMetaData().getDatabaseProductName().toLowerCase(Locale.ROOT);
            if (product.contains("postgres")) {
                return TandemProperties.Kind.POSTGRES;
            }
            if (product.contains("mariadb") || product.contains("mysql")) {
                return TandemProperties.Kind.MARIADB;
            }
            throw new InvalidTandemSettingException("tandem.datasources." + beanName + ".kind", "DataSource bean '" + beanName + "' is " + product
                    + ": Tandem enlists PostgreSQL and MariaDB (MySQL) only; leave it out with tandem.datasources." + beanName + ".enabled=false");
        } catch (SQLException e) {
            LOG.log(Level.FINE, "tandem: could not open a connection of " + beanName, e);
            throw new InvalidTandemSettingException("tandem.datasources." + beanName + ".kind", "the database behind DataSource bean '" + beanName
                    + "' cannot be told from its class (" + ds.getClass().getName() + ") and a connection to ask it failed (" + e.getMessage()
                    + "): set tandem.datasources." + beanName + ".kind=POSTGRES or MARIADB");
        }
    }

    /** POSTGRES or MARIADB from a JDBC URL, a driver's or a data source's class name; null when it names neither. */
    static TandemProperties.Kind kindOfName(String s) {
        if (s == null) {
            return null;
        }
        String l = s.toLowerCase(Locale.ROOT);
        if (l.startsWith("jdbc:postgresql:") || l.startsWith("org.postgresql.")) {
            return TandemProperties.Kind.POSTGRES;
        }
        if (l.startsWith("jdbc:mariadb:") || l.startsWith("jdbc:mysql:") || l.startsWith("org.mariadb.")) {
            return TandemProperties.Kind.MARIADB;
        }
        return null;
    }

    /** For a bean wrapped here: its TandemDataSource is to be closed with it. */
    @Override
    public boolean requiresDestruction(Object bean) {
        return made.containsKey(bean);
    }

    /**
     * Closes the TandemDataSource made for bean (the source, as Spring
     * created it), and frees its RM name here. Spring then runs the
     * source's own destroy method, if it has one.
     */
    @Override
    public void postProcessBeforeDestruction(Object bean, String beanName) {
        TandemDataSource t = made.remove(bean);
        if (t == null) {
            return;
        }
        try {
            t.close();
        } finally {
            rms.computeIfPresent(t.rmName(), (rm, n) -> n.beanName().equals(beanName) ? null : n);
        }
    }

    /** Early among the post-processors, but after Boot's binding of @ConfigurationProperties (which runs before initialization anyway). */
    @Override
    public int getOrder() {
        return Ordered.LOWEST_PRECEDENCE - 100;
    }

    /** How a pooling source is sized. */
    record Sizing(int sourceMax, int maxPoolSize, java.time.Duration acquireTimeout) {
    }
}
