/** The parts of hpack.js 2.1.6 (RFC 7541) the frame-level splice uses (the package ships no types). */
declare module 'hpack.js' {
  interface HpackTableEntry {
    readonly name: string;
    readonly value: string;
    readonly nameSize: number;
  }
  interface HpackTable {
    /** Largest size a dynamic table size update may set (the decoder side's SETTINGS_HEADER_TABLE_SIZE). */
    protocolMaxSize: number;
    maxSize: number;
    size: number;
    lookup(index: number): HpackTableEntry;
    add(name: string, value: string, nameSize: number, valueSize: number): void;
    updateSize(size: number): void;
  }
  interface HpackBitDecoder {
    push(chunk: Buffer): void;
    isEmpty(): boolean;
    decodeBit(): number;
    decodeInt(): number;
    decodeStr(): ArrayLike<number>;
  }
  const hpack: {
    table: { create(options: { maxSize: number }): HpackTable };
    decoder: { create(): HpackBitDecoder };
    utils: { stringify(octets: ArrayLike<number>): string };
  };
  export default hpack;
}
