package io.github.tandemtx.jta;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * A TCP proxy on loopback for breaking a database connection at a chosen
 * instant: bytes one way can be dropped, and the connections open so far
 * cut (closed on both sides). New connections still go through.
 */
final class TcpProxy implements AutoCloseable {
    private final ServerSocket listener;
    private final String host;
    private final int port;
    private final List<Socket> open = new CopyOnWriteArrayList<>();
    volatile boolean dropToServer;
    volatile boolean dropToClient;

    TcpProxy(String host, int port) throws IOException {
        this.host = host;
        this.port = port;
        listener = new ServerSocket();
        listener.bind(new InetSocketAddress("127.0.0.1", 0));
        Thread t = new Thread(this::accept, "tcp-proxy");
        t.setDaemon(true);
        t.start();
    }

    int port() {
        return listener.getLocalPort();
    }

    private void accept() {
        while (!listener.isClosed()) {
            try {
                Socket c = listener.accept();
                Socket s = new Socket(host, port);
                open.add(c);
                open.add(s);
                pump(c, s, true);
                pump(s, c, false);
            } catch (IOException e) {
                return;
            }
        }
    }

    private void pump(Socket from, Socket to, boolean toServer) {
        Thread t = new Thread(() -> {
            byte[] buf = new byte[16384];
            try (InputStream in = from.getInputStream(); OutputStream out = to.getOutputStream()) {
                int n;
                while ((n = in.read(buf)) > 0) {
                    if (toServer ? dropToServer : dropToClient) {
                        continue;
                    }
                    out.write(buf, 0, n);
                    out.flush();
                }
            } catch (IOException ignored) {
                // cut
            } finally {
                close(from);
                close(to);
            }
        }, "tcp-proxy-pump");
        t.setDaemon(true);
        t.start();
    }

    /** Closes every connection open now; later ones pass again (with the drop flags cleared). */
    void cut() {
        // The flags first, then only the sockets open now: a connection a
        // client opens as soon as its old one breaks (taking the decision
        // key) was closed too when the accept thread added it while this
        // loop ran (TracingTest.takingTheKey under load: "socket was closed
        // by server").
        dropToServer = false;
        dropToClient = false;
        java.util.List<Socket> now = new java.util.ArrayList<>(open);
        open.removeAll(now);
        for (Socket s : now) {
            close(s);
        }
    }

    private static void close(Socket s) {
        try {
            s.close();
        } catch (IOException ignored) {
            // already closed
        }
    }

    @Override
    public void close() throws IOException {
        listener.close();
        cut();
    }
}
