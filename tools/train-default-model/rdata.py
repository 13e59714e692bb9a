"""Minimal reader for R's lazy-load data bases (.rdx/.rdb), enough to pull the
character vectors out of the Debian package r-cran-janeaustenr without R.

R's serialization format ("X\n", XDR big-endian) is documented in R Internals,
section 1.8 "Serialization Formats". Only the SEXP types a data package of
character vectors uses are handled; anything else raises ValueError.
"""

import gzip
import struct
import zlib

NILVALUE_SXP = 254
REFSXP = 255
ALTREP_SXP = 238
# Singletons that carry no payload: global env, unbound value, missing arg,
# base namespace, empty env, base env.
PAYLOADLESS = (253, 252, 251, 250, 242, 241)
PAIRLIST_LIKE = (2, 3, 5, 6, 17, 239, 240)  # LISTSXP CLOSXP PROMSXP LANGSXP DOTSXP ATTR*


class Unserializer:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0
        self.refs = []

    def _int(self) -> int:
        (value,) = struct.unpack_from(">i", self.data, self.pos)
        self.pos += 4
        return value

    def _length(self) -> int:
        n = self._int()
        if n == -1:  # long vector: two more ints
            hi, lo = self._int(), self._int()
            n = (hi << 32) + lo
        return n

    def read(self):
        if self.data[:2] != b"X\n":
            raise ValueError("not an XDR R serialization stream")
        self.pos = 2
        version = self._int()
        self._int()  # writer's R version
        self._int()  # minimal reader version
        if version == 3:
            n = self._int()  # native encoding name
            self.pos += n
        return self._item()

    def _with_attributes(self, flags: int, value):
        if flags & (1 << 9):
            return {"value": value, "attributes": dict(self._item())}
        return value

    def _item(self):
        flags = self._int()
        sexptype = flags & 0xFF
        has_attr = flags & (1 << 9)
        has_tag = flags & (1 << 10)
        if sexptype == NILVALUE_SXP or sexptype in PAYLOADLESS:
            return None
        if sexptype == REFSXP:
            index = flags >> 8
            if index == 0:
                index = self._int()
            return self.refs[index - 1]
        if sexptype == 1:  # SYMSXP: a CHARSXP follows; symbols enter the ref table
            name = self._item()
            self.refs.append(name)
            return name
        if sexptype in PAIRLIST_LIKE:
            if has_attr:
                self._item()
            tag = self._item() if has_tag else None
            car = self._item()
            cdr = self._item()
            out = [(tag, car)]
            if isinstance(cdr, list):
                out += cdr
            return out
        if sexptype == 9:  # CHARSXP
            n = self._int()
            if n == -1:
                return None  # NA_character_
            raw = self.data[self.pos:self.pos + n]
            self.pos += n
            return raw.decode("utf-8", "replace")
        if sexptype in (10, 13):  # LGLSXP, INTSXP
            n = self._length()
            value = list(struct.unpack_from(">%di" % n, self.data, self.pos))
            self.pos += 4 * n
            return self._with_attributes(flags, value)
        if sexptype == 14:  # REALSXP
            n = self._length()
            value = list(struct.unpack_from(">%dd" % n, self.data, self.pos))
            self.pos += 8 * n
            return self._with_attributes(flags, value)
        if sexptype in (16, 19, 20):  # STRSXP, VECSXP, EXPRSXP
            n = self._length()
            value = [self._item() for _ in range(n)]
            return self._with_attributes(flags, value)
        if sexptype == ALTREP_SXP:
            self._item()  # class info
            state = self._item()
            self._item()  # attributes
            return state
        raise ValueError("unsupported R SEXP type %d" % sexptype)


def read_lazyload_db(rdx_path: str, rdb_path: str) -> dict:
    """Returns {object name: unserialized object} for one lazy-load data base."""
    index = Unserializer(gzip.open(rdx_path).read()).read()
    fields = dict(zip(index["attributes"]["names"], index["value"]))
    variables = fields["variables"]
    names = variables["attributes"]["names"]
    with open(rdb_path, "rb") as f:
        db = f.read()
    out = {}
    for name, (offset, length) in zip(names, variables["value"]):
        blob = db[int(offset):int(offset) + int(length)]
        (size,) = struct.unpack(">I", blob[:4])
        raw = zlib.decompress(blob[4:])  # compression type 1 (zlib)
        if len(raw) != size:
            raise ValueError("bad object size for %s" % name)
        out[name] = Unserializer(raw).read()
    return out
