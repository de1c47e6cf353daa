/** A TCP proxy in front of the service that cuts the first connections once the service
 * starts to answer on them: the request was applied, and its answer is lost. */

import net from "node:net";
import type { AddressInfo } from "node:net";

export class DroppingProxy {
  /** Connections made through the proxy so far. */
  connections = 0;
  private readonly server: net.Server;
  private readonly sockets = new Set<net.Socket>();

  private constructor(
    private readonly target: URL,
    private drops: number,
  ) {
    this.server = net.createServer((client) => this.relay(client));
  }

  /** A proxy to `target` (an http:// URL) that cuts the first `drops` connections. */
  static async start(target: string, drops: number): Promise<DroppingProxy> {
    const proxy = new DroppingProxy(new URL(target), drops);
    await new Promise<void>((resolve) => proxy.server.listen(0, "127.0.0.1", resolve));
    return proxy;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  private relay(client: net.Socket): void {
    this.connections++;
    const cut = this.drops > 0;
    if (cut) this.drops--;
    const upstream = net.connect(Number(this.target.port), this.target.hostname);
    for (const s of [client, upstream]) {
      this.sockets.add(s);
      s.on("close", () => this.sockets.delete(s));
    }
    client.pipe(upstream);
    if (cut) {
      upstream.once("data", () => {
        client.destroy();
        upstream.destroy();
      });
    } else {
      upstream.pipe(client);
    }
    client.on("error", () => upstream.destroy());
    upstream.on("error", () => client.destroy());
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      this.server.close(() => resolve());
      for (const s of this.sockets) s.destroy();
    });
  }
}
