package io.github.tandemtx.jta;

import com.google.protobuf.ByteString;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.UnknownFieldSet;
import io.grpc.Grpc;
import io.grpc.InsecureServerCredentials;
import io.grpc.MethodDescriptor;
import io.grpc.Server;
import io.grpc.ServerServiceDefinition;
import io.grpc.stub.ServerCalls;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * An OTLP/gRPC trace receiver on 127.0.0.1: what a coordinator started with
 * {@code --otlp-endpoint} exports to (the Go side's test/e2e/tracing_test.go
 * otlpCollector). The ExportTraceServiceRequest is read straight from the
 * protobuf wire format (field numbers of opentelemetry/proto/trace/v1), so
 * that the test needs no OTLP classes.
 */
final class OtlpCollector implements AutoCloseable {
    /** One span of either side: client (the SDK's) or coordinator (exported here). */
    record SpanRec(String side, String name, String traceId, String spanId, String parentId, Map<String, String> attrs) {
    }

    private static final MethodDescriptor.Marshaller<byte[]> BYTES = new MethodDescriptor.Marshaller<>() {
        @Override
        public InputStream stream(byte[] value) {
            return new ByteArrayInputStream(value);
        }

        @Override
        public byte[] parse(InputStream in) {
            try {
                return in.readAllBytes();
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    };

    private final Server server;
    private final List<SpanRec> spans = new ArrayList<>();

    OtlpCollector() throws IOException {
        MethodDescriptor<byte[], byte[]> export = MethodDescriptor.<byte[], byte[]>newBuilder()
                .setType(MethodDescriptor.MethodType.UNARY)
                .setFullMethodName("opentelemetry.proto.collector.trace.v1.TraceService/Export")
                .setRequestMarshaller(BYTES).setResponseMarshaller(BYTES).build();
        ServerServiceDefinition svc = ServerServiceDefinition.builder("opentelemetry.proto.collector.trace.v1.TraceService")
                .addMethod(export, ServerCalls.asyncUnaryCall((req, resp) -> {
                    try {
                        take(req);
                    } catch (InvalidProtocolBufferException e) {
                        resp.onError(io.grpc.Status.INVALID_ARGUMENT.withDescription(e.getMessage()).asRuntimeException());
                        return;
                    }
                    resp.onNext(new byte[0]); // an empty ExportTraceServiceResponse
                    resp.onCompleted();
                })).build();
        server = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create()).addService(svc).build().start();
    }

    /** host:port for --otlp-endpoint. */
    String addr() {
        return "127.0.0.1:" + server.getPort();
    }

    private void take(byte[] req) throws InvalidProtocolBufferException {
        List<SpanRec> got = new ArrayList<>();
        for (ByteString rs : fields(UnknownFieldSet.parseFrom(req), 1)) { // resource_spans
            UnknownFieldSet r = UnknownFieldSet.parseFrom(rs);
            String service = null;
            for (ByteString res : fields(r, 1)) { // resource
                Map<String, String> ra = attributes(UnknownFieldSet.parseFrom(res), 1);
                service = ra.get("service.name");
            }
            for (ByteString ss : fields(r, 2)) { // scope_spans
                for (ByteString sp : fields(UnknownFieldSet.parseFrom(ss), 2)) { // spans
                    UnknownFieldSet s = UnknownFieldSet.parseFrom(sp);
                    Map<String, String> a = attributes(s, 9);
                    if (service != null) {
                        a.put("service.name", service);
                    }
                    got.add(new SpanRec("coordinator", string(s, 5), hex(s, 1), hex(s, 2), hex(s, 4), a));
                }
            }
        }
        synchronized (spans) {
            spans.addAll(got);
        }
    }

    private static List<ByteString> fields(UnknownFieldSet s, int n) {
        return s.hasField(n) ? s.getField(n).getLengthDelimitedList() : List.of();
    }

    private static String string(UnknownFieldSet s, int n) {
        List<ByteString> f = fields(s, n);
        return f.isEmpty() ? "" : f.get(0).toStringUtf8();
    }

    private static String hex(UnknownFieldSet s, int n) {
        List<ByteString> f = fields(s, n);
        return f.isEmpty() ? "" : HexFormat.of().formatHex(f.get(0).toByteArray());
    }

    /** The KeyValue list at field n, each AnyValue as text (string, bool, int, double). */
    private static Map<String, String> attributes(UnknownFieldSet s, int n) throws InvalidProtocolBufferException {
        Map<String, String> out = new LinkedHashMap<>();
        for (ByteString kvb : fields(s, n)) {
            UnknownFieldSet kv = UnknownFieldSet.parseFrom(kvb);
            String key = string(kv, 1);
            List<ByteString> vf = fields(kv, 2);
            if (vf.isEmpty()) {
                continue;
            }
            UnknownFieldSet v = UnknownFieldSet.parseFrom(vf.get(0));
            String text;
            if (v.hasField(1)) {
                text = string(v, 1);
            } else if (v.hasField(2)) {
                text = String.valueOf(v.getField(2).getVarintList().get(0) != 0);
            } else if (v.hasField(3)) {
                text = String.valueOf(v.getField(3).getVarintList().get(0));
            } else if (v.hasField(4)) {
                text = String.valueOf(Double.longBitsToDouble(v.getField(4).getFixed64List().get(0)));
            } else {
                text = v.toString();
            }
            out.put(key, text);
        }
        return out;
    }

    /** The spans received so far of trace traceId (hex). */
    List<SpanRec> of(String traceId) {
        List<SpanRec> out = new ArrayList<>();
        synchronized (spans) {
            for (SpanRec s : spans) {
                if (s.traceId().equals(traceId)) {
                    out.add(s);
                }
            }
        }
        return out;
    }

    /** Every span received so far. */
    List<SpanRec> all() {
        synchronized (spans) {
            return new ArrayList<>(spans);
        }
    }

    @Override
    public void close() {
        try {
            server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
