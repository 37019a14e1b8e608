/**
 * A small CRI v1 client over a unix socket, decoding with the same proto as the proxy: used by the
 * tests and the benchmark to talk to the proxy or straight to containerd, the way the kubelet does.
 */
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { CRI_PROTO_FILE, MAX_MESSAGE_BYTES, criMethods, type CriMethod } from './proxy.ts';

let clientPackage: protoLoader.PackageDefinition | undefined;

/** Decoding for humans: default values filled in (an enum at 0, e.g. SANDBOX_READY, is not omitted). */
function clientPackageDefinition(): protoLoader.PackageDefinition {
  clientPackage ??= protoLoader.loadSync(CRI_PROTO_FILE, { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true });
  return clientPackage;
}

export interface CriCallOptions {
  metadata?: grpc.Metadata;
  /** Absolute deadline (ms since epoch) or a Date. */
  deadline?: number | Date;
}

export class CriClient {
  readonly client: grpc.Client;
  private readonly methods = new Map<string, CriMethod>();

  constructor(
    readonly socket: string,
    options: grpc.ChannelOptions = {},
  ) {
    this.client = new grpc.Client(`unix://${socket}`, grpc.credentials.createInsecure(), {
      'grpc.max_receive_message_length': MAX_MESSAGE_BYTES,
      'grpc.max_send_message_length': MAX_MESSAGE_BYTES,
      'grpc.initial_reconnect_backoff_ms': 100,
      'grpc.max_reconnect_backoff_ms': 1000,
      ...options,
    });
    for (const m of criMethods(clientPackageDefinition())) this.methods.set(m.name, m);
  }

  method(name: string): CriMethod {
    const m = this.methods.get(name);
    if (!m) throw new Error(`unknown CRI method ${name}`);
    return m;
  }

  /** A unary call by method name ("Version", "ListImages", ...), request and response as plain objects. */
  call<T = any>(name: string, request: object = {}, opts: CriCallOptions = {}): Promise<T> {
    const m = this.method(name);
    const d = m.definition;
    return new Promise<T>((resolve, reject) => {
      this.client.makeUnaryRequest(
        m.path,
        d.requestSerialize as (v: object) => Buffer,
        d.responseDeserialize as (b: Buffer) => T,
        request,
        opts.metadata ?? new grpc.Metadata(),
        opts.deadline !== undefined ? { deadline: opts.deadline } : {},
        (err, value) => (err ? reject(err) : resolve(value as T)),
      );
    });
  }

  /** A server-streaming call by method name. */
  stream<T = any>(name: string, request: object = {}, opts: CriCallOptions = {}): grpc.ClientReadableStream<T> {
    const m = this.method(name);
    const d = m.definition;
    return this.client.makeServerStreamRequest(
      m.path,
      d.requestSerialize as (v: object) => Buffer,
      d.responseDeserialize as (b: Buffer) => T,
      request,
      opts.metadata ?? new grpc.Metadata(),
      opts.deadline !== undefined ? { deadline: opts.deadline } : {},
    );
  }

  close(): void {
    this.client.close();
  }
}
