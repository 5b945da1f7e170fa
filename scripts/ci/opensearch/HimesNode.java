import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;

import org.opensearch.analysis.common.CommonAnalysisPlugin;
import org.opensearch.common.logging.LogConfigurator;
import org.opensearch.common.settings.Settings;
import org.opensearch.env.Environment;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.transport.Netty4Plugin;

/**
 * One OpenSearch node in its own JVM, for himes's CI cluster (see
 * scripts/ci/opensearch.sh). The OpenSearch distribution is not on Maven
 * Central, its server jar and modules are: this main runs the server's own
 * Node with the two modules himes needs (HTTP, and the analysis filters)
 * loaded from the class path instead of a modules/ folder. Each node is a
 * separate process, so a test can kill or stall one (kill -9, kill -STOP).
 *
 * Usage: java -cp 'LIB/*:DIR' HimesNode HOME — HOME/config holds the
 * node's opensearch.yml and log4j2.properties.
 */
public final class HimesNode {
    private HimesNode() {}

    /** The server's Node with modules given as classes. */
    static final class ClasspathNode extends Node {
        ClasspathNode(Environment env) {
            super(env, List.of(Netty4Plugin.class, CommonAnalysisPlugin.class), true);
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: HimesNode HOME (HOME/config holds opensearch.yml and log4j2.properties)");
            System.exit(2);
        }
        Path home = Path.of(args[0]).toAbsolutePath();
        Settings input = Settings.builder().put("path.home", home.toString()).build();
        Environment env = InternalSettingsPreparer.prepareEnvironment(input, Map.of(), home.resolve("config"), () -> "node");
        LogConfigurator.configure(env);
        Node node = new ClasspathNode(env);
        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                node.close();
            } catch (Exception e) {
                e.printStackTrace();
            } finally {
                closed.countDown();
            }
        }, "himes-node-shutdown"));
        node.start();
        closed.await();
    }
}
