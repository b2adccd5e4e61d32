package io.github.tandemtx.bench;

import java.net.URI;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Turns the Go side's DSNs (TANDEM_PG_DSN, TANDEM_MYSQL_DSN, as
 * {@code scripts/db env} prints them) into JDBC URLs, so that the Java and the
 * Go benchmarks reach the same databases from the same environment. A JDBC URL
 * is passed through unchanged.
 */
final class Dsn {
    private Dsn() {}

    /** Parameters of the Go MySQL driver that mean nothing to Connector/J. */
    private static final List<String> GO_ONLY = List.of("multiStatements", "interpolateParams", "parseTime", "loc", "tls");

    /**
     * postgres://user:pass@host:port/db?sslmode=disable becomes
     * jdbc:postgresql://host:port/db?user=user&amp;password=pass&amp;sslmode=disable.
     */
    static String postgres(String dsn) {
        if (dsn.startsWith("jdbc:")) {
            return dsn;
        }
        if (!dsn.startsWith("postgres://") && !dsn.startsWith("postgresql://")) {
            throw new IllegalArgumentException("not a postgres:// URL or a jdbc:postgresql: URL: " + redact(dsn));
        }
        URI u = URI.create(dsn);
        List<String> params = new ArrayList<>();
        String ui = u.getRawUserInfo();
        if (ui != null) {
            int c = ui.indexOf(':');
            params.add("user=" + (c < 0 ? ui : ui.substring(0, c)));
            if (c >= 0) {
                params.add("password=" + ui.substring(c + 1));
            }
        }
        if (u.getRawQuery() != null) {
            params.add(u.getRawQuery());
        }
        int port = u.getPort() < 0 ? 5432 : u.getPort();
        return "jdbc:postgresql://" + u.getHost() + ":" + port + u.getRawPath() + "?" + String.join("&", params);
    }

    private static final Pattern MYSQL = Pattern.compile("^(?:([^:@]*)(?::(.*))?@)?tcp\\(([^)]*)\\)/([^?]*)(?:\\?(.*))?$");

    /**
     * user:pass@tcp(host:port)/db?params (the Go MySQL driver's form) becomes
     * jdbc:mariadb://host:port/db?user=user&amp;password=pass, leaving out the
     * Go driver's own parameters.
     */
    static String mariadb(String dsn) {
        if (dsn.startsWith("jdbc:")) {
            return dsn;
        }
        Matcher m = MYSQL.matcher(dsn);
        if (!m.matches()) {
            throw new IllegalArgumentException("not a user:pass@tcp(host:port)/db DSN or a jdbc:mariadb: URL: " + redact(dsn));
        }
        List<String> params = new ArrayList<>();
        if (m.group(1) != null) {
            params.add("user=" + m.group(1));
        }
        if (m.group(2) != null) {
            params.add("password=" + URLDecoder.decode(m.group(2), StandardCharsets.UTF_8));
        }
        if (m.group(5) != null) {
            for (String p : m.group(5).split("&")) {
                String k = p.contains("=") ? p.substring(0, p.indexOf('=')) : p;
                if (!p.isEmpty() && !GO_ONLY.contains(k)) {
                    params.add(p);
                }
            }
        }
        return "jdbc:mariadb://" + m.group(3) + "/" + m.group(4) + "?" + String.join("&", params);
    }

    /** Adds a parameter unless the URL already sets it. */
    static String withDefault(String url, String key, String value) {
        if (url.matches(".*[?&]" + Pattern.quote(key) + "=.*")) {
            return url;
        }
        return url + (url.contains("?") ? "&" : "?") + key + "=" + value;
    }

    /** The URL without its password, for error messages. */
    static String redact(String url) {
        return url.replaceAll("(password=)[^&]*", "$1***").replaceAll("(//[^:/@]*:)[^@/]*@", "$1***@").replaceAll("^([^:@/]*:)[^@]*@", "$1***@");
    }
}
