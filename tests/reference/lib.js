'use strict';
// Small, dependency-free helpers shared by gen.js and check.js:
// a seeded PRNG, .npy / safetensors readers and writers, and a JSON encoder
// that formats like Python's json.dumps (what Keras' model.to_json() uses).

const fs = require('fs');

// ---------------------------------------------------------------- PRNG
// mulberry32: 32-bit state, period 2^32, deterministic across platforms.
function mulberry32(seed) {
  let a = seed >>> 0;
  return function next() {
    a = (a + 0x6D2B79F5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;  // [0, 1)
  };
}

function uniformArray(rng, n, lo, hi) {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = lo + (hi - lo) * rng();
  return out;
}

// ---------------------------------------------------------------- .npy
// NumPy format v1.0, little-endian float32, C order.
function npyBytes(shape, data) {
  if (!(data instanceof Float32Array)) data = Float32Array.from(data);
  const n = shape.reduce((a, b) => a * b, 1);
  if (n !== data.length) throw new Error(`npy: shape ${shape} vs ${data.length} values`);
  const shapeStr = shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(', ')})`;
  let header = `{'descr': '<f4', 'fortran_order': False, 'shape': ${shapeStr}, }`;
  const preamble = 10;  // magic(6) + version(2) + header_len(2)
  const total = Math.ceil((preamble + header.length + 1) / 64) * 64;
  header = header + ' '.repeat(total - preamble - header.length - 1) + '\n';
  const buf = Buffer.alloc(total + data.length * 4);
  buf.write('\x93NUMPY', 0, 'latin1');
  buf[6] = 1; buf[7] = 0;
  buf.writeUInt16LE(header.length, 8);
  buf.write(header, 10, 'latin1');
  for (let i = 0; i < data.length; i++) buf.writeFloatLE(data[i], total + 4 * i);
  return buf;
}

function readNpy(path) {
  const buf = fs.readFileSync(path);
  if (buf.toString('latin1', 0, 6) !== '\x93NUMPY') throw new Error(`${path}: not npy`);
  const hlen = buf.readUInt16LE(8);
  const header = buf.toString('latin1', 10, 10 + hlen);
  if (!header.includes("'descr': '<f4'")) throw new Error(`${path}: not <f4`);
  const m = header.match(/'shape': \(([^)]*)\)/);
  const shape = m[1].split(',').map(s => s.trim()).filter(s => s).map(Number);
  const off = 10 + hlen;
  const n = shape.reduce((a, b) => a * b, 1);
  const data = new Float32Array(n);
  for (let i = 0; i < n; i++) data[i] = buf.readFloatLE(off + 4 * i);
  return { shape, data };
}

// ---------------------------------------------------------------- safetensors
// 8-byte LE u64 header length N, N bytes of JSON header, then raw data.
// tensors: array of {name, shape, data, dtype: 'F32' (default) or 'I64'}
// (written in this order).
function safetensorsBytes(tensors) {
  const header = {};
  let off = 0;
  for (const t of tensors) {
    const nbytes = t.data.length * (t.dtype === 'I64' ? 8 : 4);
    header[t.name] = { dtype: t.dtype || 'F32', shape: t.shape, data_offsets: [off, off + nbytes] };
    off += nbytes;
  }
  let hjson = JSON.stringify(header);
  // pad the header with spaces so the data section starts 8-byte aligned
  // (allowed by the format, and what the reference writer does).
  const pad = (8 - ((8 + hjson.length) % 8)) % 8;
  hjson += ' '.repeat(pad);
  const hbuf = Buffer.from(hjson, 'utf8');
  const buf = Buffer.alloc(8 + hbuf.length + off);
  buf.writeBigUInt64LE(BigInt(hbuf.length), 0);
  hbuf.copy(buf, 8);
  let p = 8 + hbuf.length;
  for (const t of tensors) {
    if (t.dtype === 'I64') {
      for (let i = 0; i < t.data.length; i++) { buf.writeBigInt64LE(BigInt(t.data[i]), p); p += 8; }
    } else {
      for (let i = 0; i < t.data.length; i++) { buf.writeFloatLE(t.data[i], p); p += 4; }
    }
  }
  return buf;
}

function readSafetensors(path) {
  const buf = fs.readFileSync(path);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.toString('utf8', 8, 8 + n));
  const base = 8 + n;
  const out = {};
  for (const [name, info] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const [b, e] = info.data_offsets;
    let data;
    if (info.dtype === 'I64') {
      data = new Float64Array((e - b) / 8);
      for (let i = 0; i < data.length; i++) data[i] = Number(buf.readBigInt64LE(base + b + 8 * i));
    } else {
      data = new Float32Array((e - b) / 4);
      for (let i = 0; i < data.length; i++) data[i] = buf.readFloatLE(base + b + 4 * i);
    }
    out[name] = { shape: info.shape, data, dtype: info.dtype };
  }
  return out;
}

// ---------------------------------------------------------------- Python-style JSON
// Python's json.dumps writes ", " and ": " separators and writes Python
// floats with a decimal point (0.0, 6.0). Wrap a number in PyFloat to get
// the float spelling; plain JS numbers that are integers print as ints.
class PyFloat {
  constructor(v) { this.v = v; }
}
const pyf = v => new PyFloat(v);

function pyFloatRepr(v) {
  if (!isFinite(v)) throw new Error('non-finite float in JSON');
  // JS shortest round-trip repr matches Python repr for the values used here;
  // add ".0" to integral values.
  let s = String(v);
  if (/^-?\d+$/.test(s)) s += '.0';
  return s;
}

function pyJSON(x) {
  if (x === null || x === undefined) return 'null';
  if (x instanceof PyFloat) return pyFloatRepr(x.v);
  if (typeof x === 'boolean') return x ? 'true' : 'false';
  if (typeof x === 'number') {
    if (!Number.isInteger(x)) return pyFloatRepr(x);
    return String(x);
  }
  if (typeof x === 'string') {
    // ensure_ascii=True: JSON.stringify already escapes control chars; all
    // strings here are ASCII.
    return JSON.stringify(x);
  }
  if (Array.isArray(x)) return '[' + x.map(pyJSON).join(', ') + ']';
  if (typeof x === 'object') {
    return '{' + Object.entries(x).map(([k, v]) => JSON.stringify(k) + ': ' + pyJSON(v)).join(', ') + '}';
  }
  throw new Error('pyJSON: unsupported ' + typeof x);
}

module.exports = {
  mulberry32, uniformArray, npyBytes, readNpy, safetensorsBytes, readSafetensors,
  PyFloat, pyf, pyJSON,
};
