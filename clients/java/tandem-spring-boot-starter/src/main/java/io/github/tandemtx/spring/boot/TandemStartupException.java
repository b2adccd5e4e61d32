package io.github.tandemtx.spring.boot;

/**
 * The coordinator failed the start-up check (tandem.verify-on-startup): it
 * did not answer, does not serve, or does not know a data source's resource
 * manager. The message is {@code TandemTransactionManager.verify()}'s
 * reason; {@link TandemFailureAnalyzer} reports it.
 */
public class TandemStartupException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public TandemStartupException(String message, Throwable cause) {
        super(message, cause);
    }
}
