package io.github.tandemtx.spring.boot;

import java.net.URI;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The test databases' JDBC URLs from the Go side's DSNs (TANDEM_PG_DSN,
 * TANDEM_MYSQL_DSN from {@code scripts/db test-env}); JDBC URLs pass
 * unchanged. (examples/spring's, copied: test sources are not shared.)
 */
final class JdbcUrls {
    private JdbcUrls() {}

    /** The test database on PostgreSQL, $TANDEM_PG_DSN. */
    static String pg() {
        return postgres(env("TANDEM_PG_DSN"));
    }

    /** The test database on MariaDB, $TANDEM_MYSQL_DSN. */
    static String maria() {
        return mariadb(env("TANDEM_MYSQL_DSN"));
    }

    private static String env(String name) {
        String v = System.getenv(name);
        if (v == null || v.isEmpty()) {
            throw new IllegalStateException(name + " is not set: run the tests after eval \"$(scripts/db test-env)\"");
        }
        return v;
    }

    /** postgres://user:pass@host:port/db?params → jdbc:postgresql://host:port/db?user=…&amp;password=…&amp;params. */
    static String postgres(String dsn) {
        if (dsn.startsWith("jdbc:")) {
            return dsn;
        }
        URI u = URI.create(dsn);
        List<String> params = new ArrayList<>();
        if (u.getRawUserInfo() != null) {
            String[] ui = u.getRawUserInfo().split(":", 2);
            params.add("user=" + ui[0]);
            if (ui.length > 1) {
                params.add("password=" + ui[1]);
            }
        }
        if (u.getRawQuery() != null) {
            params.add(u.getRawQuery());
        }
        return "jdbc:postgresql://" + u.getHost() + ":" + (u.getPort() > 0 ? u.getPort() : 5432) + u.getRawPath() + "?" + String.join("&", params);
    }

    private static final Pattern MYSQL = Pattern.compile("^([^:@]*)(?::([^@]*))?@tcp\\(([^)]*)\\)/([^?]*)");

    /** user:pass@tcp(host:port)/db?… (the Go driver's form) → jdbc:mariadb://host:port/db?user=…&amp;password=…&amp;allowMultiQueries=true. */
    static String mariadb(String dsn) {
        if (dsn.startsWith("jdbc:")) {
            return dsn;
        }
        Matcher m = MYSQL.matcher(dsn);
        if (!m.find()) {
            throw new IllegalArgumentException("TANDEM_MYSQL_DSN is neither a jdbc:mariadb: URL nor user:password@tcp(host:port)/db");
        }
        // allowMultiQueries: tandem-jta then sends XA END with XA PREPARE in one round trip.
        return "jdbc:mariadb://" + m.group(3) + "/" + m.group(4) + "?user=" + m.group(1) + (m.group(2) == null ? "" : "&password=" + m.group(2))
                + "&allowMultiQueries=true";
    }
}
