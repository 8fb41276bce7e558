/*
 * tw_native - stock vLLM per-token logprobs read from the raw bytes.
 * See tw_native.h for the contract.
 *
 * Layout: a forward-only walk over the validated content array.  Each
 * element object is read key by key (the key is classified by length and
 * bytes; "token", "token_id", "logprob" and "top_logprobs" are decoded, any
 * other value is skipped with a bracket/string-aware scan), keeping the last
 * occurrence of every key; the top_logprobs array of an entry is decoded
 * while it is read, and read again from scratch if the key repeats.
 *
 * Numbers (value = w * 10^q, w the first 19 significant digits) are
 * converted exactly in three steps:
 *   1. w times a 128-bit table value T(q) ~ 5^q * 2^-s(q): the 192-bit
 *      product w * T is within w units (in its last place) of the exact
 *      w * 5^q * 2^-s, which decides the rounding unless the bits below the
 *      rounding position are all ones down to bit 64.  For 5^q exact in 128
 *      bits (0 <= q <= 55) the product is exact and ties are decided
 *      exactly.  When digits beyond the 19th were dropped, w and w + 1 must
 *      round to the same double;
 *   2. when the product cannot decide and no digit was dropped, the value
 *      is (nearly always) a double or halfway between two: w <= 2^53 and
 *      |q| <= 22 take one correctly rounded double multiplication or
 *      division of exact operands, -27 <= q < 0 with 5^-q dividing w the
 *      integer w / 5^-q rounded and scaled by 2^q;
 *   3. otherwise an exact big-integer comparison of the decimal value with
 *      the halfway point above a floor candidate taken from step 1 (at most
 *      800 significant digits are kept, plus a sticky nonzero digit).
 * With SSE2 the usual literal (<= 8 integer digits, a fraction, no
 * exponent, <= 19 digits) is delimited and read without loops.
 * T(q) for q in [-343, 308]: for q >= 0 the top 128 bits of 5^q (truncated;
 * exact up to q = 55); for q < 0, floor(2^(127 + bitlen(5^-q)) / 5^-q).  In
 * both cases T <= 5^q * 2^-s(q) < T + 1 with s(q) = floor(q log2 5) - 127.
 * tests/c/check_native.py regenerates the table and compares.
 *
 * Skipping: strings with an SSE2 (or 8-byte SWAR) search for '"' and '\';
 * containers whose first structural byte closes them (int arrays such as
 * "bytes") with one search; other containers 64 bytes per step, masking
 * string interiors with a prefix XOR of the unescaped quotes and walking the
 * remaining brackets.
 *
 * Build switches (for tests): TW_NO_SIMD selects the portable scanning and
 * number code, TWN_NO_INT128 the portable 64x64->128 multiplication.
 */
#include "tw_native.h"
#include "tw_util.h"
#include "tw_mem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if !defined(TW_NO_SIMD) && (defined(__x86_64__) || defined(_M_X64))
#define TWN_SSE2 1
#include <emmintrin.h>
#endif

#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#endif

#if defined(__GNUC__) || defined(__clang__)
#define TWN_LIKELY(x) __builtin_expect(!!(x), 1)
#define TWN_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define TWN_LIKELY(x) (x)
#define TWN_UNLIKELY(x) (x)
#endif

/* ------------------------------------------------------------------------ */
/* 128-bit powers of five                                                    */
/* ------------------------------------------------------------------------ */

#define TWN_QMIN (-343)
#define TWN_QMAX 308

/* {high, low} 64-bit halves of T(q), q = TWN_QMIN + index. */
static const uint64_t TWN_POW5[TWN_QMAX - TWN_QMIN + 1][2] = {
    {0xbf29dcaba82fdeaeu, 0x7432ee873880fc33u}, /* -343 */
    {0xeef453d6923bd65au, 0x113faa2906a13b3fu}, /* -342 */
    {0x9558b4661b6565f8u, 0x4ac7ca59a424c507u}, /* -341 */
    {0xbaaee17fa23ebf76u, 0x5d79bcf00d2df649u}, /* -340 */
    {0xe95a99df8ace6f53u, 0xf4d82c2c107973dcu}, /* -339 */
    {0x91d8a02bb6c10594u, 0x79071b9b8a4be869u}, /* -338 */
    {0xb64ec836a47146f9u, 0x9748e2826cdee284u}, /* -337 */
    {0xe3e27a444d8d98b7u, 0xfd1b1b2308169b25u}, /* -336 */
    {0x8e6d8c6ab0787f72u, 0xfe30f0f5e50e20f7u}, /* -335 */
    {0xb208ef855c969f4fu, 0xbdbd2d335e51a935u}, /* -334 */
    {0xde8b2b66b3bc4723u, 0xad2c788035e61382u}, /* -333 */
    {0x8b16fb203055ac76u, 0x4c3bcb5021afcc31u}, /* -332 */
    {0xaddcb9e83c6b1793u, 0xdf4abe242a1bbf3du}, /* -331 */
    {0xd953e8624b85dd78u, 0xd71d6dad34a2af0du}, /* -330 */
    {0x87d4713d6f33aa6bu, 0x8672648c40e5ad68u}, /* -329 */
    {0xa9c98d8ccb009506u, 0x680efdaf511f18c2u}, /* -328 */
    {0xd43bf0effdc0ba48u, 0x0212bd1b2566def2u}, /* -327 */
    {0x84a57695fe98746du, 0x014bb630f7604b57u}, /* -326 */
    {0xa5ced43b7e3e9188u, 0x419ea3bd35385e2du}, /* -325 */
    {0xcf42894a5dce35eau, 0x52064cac828675b9u}, /* -324 */
    {0x818995ce7aa0e1b2u, 0x7343efebd1940993u}, /* -323 */
    {0xa1ebfb4219491a1fu, 0x1014ebe6c5f90bf8u}, /* -322 */
    {0xca66fa129f9b60a6u, 0xd41a26e077774ef6u}, /* -321 */
    {0xfd00b897478238d0u, 0x8920b098955522b4u}, /* -320 */
    {0x9e20735e8cb16382u, 0x55b46e5f5d5535b0u}, /* -319 */
    {0xc5a890362fddbc62u, 0xeb2189f734aa831du}, /* -318 */
    {0xf712b443bbd52b7bu, 0xa5e9ec7501d523e4u}, /* -317 */
    {0x9a6bb0aa55653b2du, 0x47b233c92125366eu}, /* -316 */
    {0xc1069cd4eabe89f8u, 0x999ec0bb696e840au}, /* -315 */
    {0xf148440a256e2c76u, 0xc00670ea43ca250du}, /* -314 */
    {0x96cd2a865764dbcau, 0x380406926a5e5728u}, /* -313 */
    {0xbc807527ed3e12bcu, 0xc605083704f5ecf2u}, /* -312 */
    {0xeba09271e88d976bu, 0xf7864a44c633682eu}, /* -311 */
    {0x93445b8731587ea3u, 0x7ab3ee6afbe0211du}, /* -310 */
    {0xb8157268fdae9e4cu, 0x5960ea05bad82964u}, /* -309 */
    {0xe61acf033d1a45dfu, 0x6fb92487298e33bdu}, /* -308 */
    {0x8fd0c16206306babu, 0xa5d3b6d479f8e056u}, /* -307 */
    {0xb3c4f1ba87bc8696u, 0x8f48a4899877186cu}, /* -306 */
    {0xe0b62e2929aba83cu, 0x331acdabfe94de87u}, /* -305 */
    {0x8c71dcd9ba0b4925u, 0x9ff0c08b7f1d0b14u}, /* -304 */
    {0xaf8e5410288e1b6fu, 0x07ecf0ae5ee44dd9u}, /* -303 */
    {0xdb71e91432b1a24au, 0xc9e82cd9f69d6150u}, /* -302 */
    {0x892731ac9faf056eu, 0xbe311c083a225cd2u}, /* -301 */
    {0xab70fe17c79ac6cau, 0x6dbd630a48aaf406u}, /* -300 */
    {0xd64d3d9db981787du, 0x092cbbccdad5b108u}, /* -299 */
    {0x85f0468293f0eb4eu, 0x25bbf56008c58ea5u}, /* -298 */
    {0xa76c582338ed2621u, 0xaf2af2b80af6f24eu}, /* -297 */
    {0xd1476e2c07286faau, 0x1af5af660db4aee1u}, /* -296 */
    {0x82cca4db847945cau, 0x50d98d9fc890ed4du}, /* -295 */
    {0xa37fce126597973cu, 0xe50ff107bab528a0u}, /* -294 */
    {0xcc5fc196fefd7d0cu, 0x1e53ed49a96272c8u}, /* -293 */
    {0xff77b1fcbebcdc4fu, 0x25e8e89c13bb0f7au}, /* -292 */
    {0x9faacf3df73609b1u, 0x77b191618c54e9acu}, /* -291 */
    {0xc795830d75038c1du, 0xd59df5b9ef6a2417u}, /* -290 */
    {0xf97ae3d0d2446f25u, 0x4b0573286b44ad1du}, /* -289 */
    {0x9becce62836ac577u, 0x4ee367f9430aec32u}, /* -288 */
    {0xc2e801fb244576d5u, 0x229c41f793cda73fu}, /* -287 */
    {0xf3a20279ed56d48au, 0x6b43527578c1110fu}, /* -286 */
    {0x9845418c345644d6u, 0x830a13896b78aaa9u}, /* -285 */
    {0xbe5691ef416bd60cu, 0x23cc986bc656d553u}, /* -284 */
    {0xedec366b11c6cb8fu, 0x2cbfbe86b7ec8aa8u}, /* -283 */
    {0x94b3a202eb1c3f39u, 0x7bf7d71432f3d6a9u}, /* -282 */
    {0xb9e08a83a5e34f07u, 0xdaf5ccd93fb0cc53u}, /* -281 */
    {0xe858ad248f5c22c9u, 0xd1b3400f8f9cff68u}, /* -280 */
    {0x91376c36d99995beu, 0x23100809b9c21fa1u}, /* -279 */
    {0xb58547448ffffb2du, 0xabd40a0c2832a78au}, /* -278 */
    {0xe2e69915b3fff9f9u, 0x16c90c8f323f516cu}, /* -277 */
    {0x8dd01fad907ffc3bu, 0xae3da7d97f6792e3u}, /* -276 */
    {0xb1442798f49ffb4au, 0x99cd11cfdf41779cu}, /* -275 */
    {0xdd95317f31c7fa1du, 0x40405643d711d583u}, /* -274 */
    {0x8a7d3eef7f1cfc52u, 0x482835ea666b2572u}, /* -273 */
    {0xad1c8eab5ee43b66u, 0xda3243650005eecfu}, /* -272 */
    {0xd863b256369d4a40u, 0x90bed43e40076a82u}, /* -271 */
    {0x873e4f75e2224e68u, 0x5a7744a6e804a291u}, /* -270 */
    {0xa90de3535aaae202u, 0x711515d0a205cb36u}, /* -269 */
    {0xd3515c2831559a83u, 0x0d5a5b44ca873e03u}, /* -268 */
    {0x8412d9991ed58091u, 0xe858790afe9486c2u}, /* -267 */
    {0xa5178fff668ae0b6u, 0x626e974dbe39a872u}, /* -266 */
    {0xce5d73ff402d98e3u, 0xfb0a3d212dc8128fu}, /* -265 */
    {0x80fa687f881c7f8eu, 0x7ce66634bc9d0b99u}, /* -264 */
    {0xa139029f6a239f72u, 0x1c1fffc1ebc44e80u}, /* -263 */
    {0xc987434744ac874eu, 0xa327ffb266b56220u}, /* -262 */
    {0xfbe9141915d7a922u, 0x4bf1ff9f0062baa8u}, /* -261 */
    {0x9d71ac8fada6c9b5u, 0x6f773fc3603db4a9u}, /* -260 */
    {0xc4ce17b399107c22u, 0xcb550fb4384d21d3u}, /* -259 */
    {0xf6019da07f549b2bu, 0x7e2a53a146606a48u}, /* -258 */
    {0x99c102844f94e0fbu, 0x2eda7444cbfc426du}, /* -257 */
    {0xc0314325637a1939u, 0xfa911155fefb5308u}, /* -256 */
    {0xf03d93eebc589f88u, 0x793555ab7eba27cau}, /* -255 */
    {0x96267c7535b763b5u, 0x4bc1558b2f3458deu}, /* -254 */
    {0xbbb01b9283253ca2u, 0x9eb1aaedfb016f16u}, /* -253 */
    {0xea9c227723ee8bcbu, 0x465e15a979c1cadcu}, /* -252 */
    {0x92a1958a7675175fu, 0x0bfacd89ec191ec9u}, /* -251 */
    {0xb749faed14125d36u, 0xcef980ec671f667bu}, /* -250 */
    {0xe51c79a85916f484u, 0x82b7e12780e7401au}, /* -249 */
    {0x8f31cc0937ae58d2u, 0xd1b2ecb8b0908810u}, /* -248 */
    {0xb2fe3f0b8599ef07u, 0x861fa7e6dcb4aa15u}, /* -247 */
    {0xdfbdcece67006ac9u, 0x67a791e093e1d49au}, /* -246 */
    {0x8bd6a141006042bdu, 0xe0c8bb2c5c6d24e0u}, /* -245 */
    {0xaecc49914078536du, 0x58fae9f773886e18u}, /* -244 */
    {0xda7f5bf590966848u, 0xaf39a475506a899eu}, /* -243 */
    {0x888f99797a5e012du, 0x6d8406c952429603u}, /* -242 */
    {0xaab37fd7d8f58178u, 0xc8e5087ba6d33b83u}, /* -241 */
    {0xd5605fcdcf32e1d6u, 0xfb1e4a9a90880a64u}, /* -240 */
    {0x855c3be0a17fcd26u, 0x5cf2eea09a55067fu}, /* -239 */
    {0xa6b34ad8c9dfc06fu, 0xf42faa48c0ea481eu}, /* -238 */
    {0xd0601d8efc57b08bu, 0xf13b94daf124da26u}, /* -237 */
    {0x823c12795db6ce57u, 0x76c53d08d6b70858u}, /* -236 */
    {0xa2cb1717b52481edu, 0x54768c4b0c64ca6eu}, /* -235 */
    {0xcb7ddcdda26da268u, 0xa9942f5dcf7dfd09u}, /* -234 */
    {0xfe5d54150b090b02u, 0xd3f93b35435d7c4cu}, /* -233 */
    {0x9efa548d26e5a6e1u, 0xc47bc5014a1a6dafu}, /* -232 */
    {0xc6b8e9b0709f109au, 0x359ab6419ca1091bu}, /* -231 */
    {0xf867241c8cc6d4c0u, 0xc30163d203c94b62u}, /* -230 */
    {0x9b407691d7fc44f8u, 0x79e0de63425dcf1du}, /* -229 */
    {0xc21094364dfb5636u, 0x985915fc12f542e4u}, /* -228 */
    {0xf294b943e17a2bc4u, 0x3e6f5b7b17b2939du}, /* -227 */
    {0x979cf3ca6cec5b5au, 0xa705992ceecf9c42u}, /* -226 */
    {0xbd8430bd08277231u, 0x50c6ff782a838353u}, /* -225 */
    {0xece53cec4a314ebdu, 0xa4f8bf5635246428u}, /* -224 */
    {0x940f4613ae5ed136u, 0x871b7795e136be99u}, /* -223 */
    {0xb913179899f68584u, 0x28e2557b59846e3fu}, /* -222 */
    {0xe757dd7ec07426e5u, 0x331aeada2fe589cfu}, /* -221 */
    {0x9096ea6f3848984fu, 0x3ff0d2c85def7621u}, /* -220 */
    {0xb4bca50b065abe63u, 0x0fed077a756b53a9u}, /* -219 */
    {0xe1ebce4dc7f16dfbu, 0xd3e8495912c62894u}, /* -218 */
    {0x8d3360f09cf6e4bdu, 0x64712dd7abbbd95cu}, /* -217 */
    {0xb080392cc4349decu, 0xbd8d794d96aacfb3u}, /* -216 */
    {0xdca04777f541c567u, 0xecf0d7a0fc5583a0u}, /* -215 */
    {0x89e42caaf9491b60u, 0xf41686c49db57244u}, /* -214 */
    {0xac5d37d5b79b6239u, 0x311c2875c522ced5u}, /* -213 */
    {0xd77485cb25823ac7u, 0x7d633293366b828bu}, /* -212 */
    {0x86a8d39ef77164bcu, 0xae5dff9c02033197u}, /* -211 */
    {0xa8530886b54dbdebu, 0xd9f57f830283fdfcu}, /* -210 */
    {0xd267caa862a12d66u, 0xd072df63c324fd7bu}, /* -209 */
    {0x8380dea93da4bc60u, 0x4247cb9e59f71e6du}, /* -208 */
    {0xa46116538d0deb78u, 0x52d9be85f074e608u}, /* -207 */
    {0xcd795be870516656u, 0x67902e276c921f8bu}, /* -206 */
    {0x806bd9714632dff6u, 0x00ba1cd8a3db53b6u}, /* -205 */
    {0xa086cfcd97bf97f3u, 0x80e8a40eccd228a4u}, /* -204 */
    {0xc8a883c0fdaf7df0u, 0x6122cd128006b2cdu}, /* -203 */
    {0xfad2a4b13d1b5d6cu, 0x796b805720085f81u}, /* -202 */
    {0x9cc3a6eec6311a63u, 0xcbe3303674053bb0u}, /* -201 */
    {0xc3f490aa77bd60fcu, 0xbedbfc4411068a9cu}, /* -200 */
    {0xf4f1b4d515acb93bu, 0xee92fb5515482d44u}, /* -199 */
    {0x991711052d8bf3c5u, 0x751bdd152d4d1c4au}, /* -198 */
    {0xbf5cd54678eef0b6u, 0xd262d45a78a0635du}, /* -197 */
    {0xef340a98172aace4u, 0x86fb897116c87c34u}, /* -196 */
    {0x9580869f0e7aac0eu, 0xd45d35e6ae3d4da0u}, /* -195 */
    {0xbae0a846d2195712u, 0x8974836059cca109u}, /* -194 */
    {0xe998d258869facd7u, 0x2bd1a438703fc94bu}, /* -193 */
    {0x91ff83775423cc06u, 0x7b6306a34627ddcfu}, /* -192 */
    {0xb67f6455292cbf08u, 0x1a3bc84c17b1d542u}, /* -191 */
    {0xe41f3d6a7377eecau, 0x20caba5f1d9e4a93u}, /* -190 */
    {0x8e938662882af53eu, 0x547eb47b7282ee9cu}, /* -189 */
    {0xb23867fb2a35b28du, 0xe99e619a4f23aa43u}, /* -188 */
    {0xdec681f9f4c31f31u, 0x6405fa00e2ec94d4u}, /* -187 */
    {0x8b3c113c38f9f37eu, 0xde83bc408dd3dd04u}, /* -186 */
    {0xae0b158b4738705eu, 0x9624ab50b148d445u}, /* -185 */
    {0xd98ddaee19068c76u, 0x3badd624dd9b0957u}, /* -184 */
    {0x87f8a8d4cfa417c9u, 0xe54ca5d70a80e5d6u}, /* -183 */
    {0xa9f6d30a038d1dbcu, 0x5e9fcf4ccd211f4cu}, /* -182 */
    {0xd47487cc8470652bu, 0x7647c3200069671fu}, /* -181 */
    {0x84c8d4dfd2c63f3bu, 0x29ecd9f40041e073u}, /* -180 */
    {0xa5fb0a17c777cf09u, 0xf468107100525890u}, /* -179 */
    {0xcf79cc9db955c2ccu, 0x7182148d4066eeb4u}, /* -178 */
    {0x81ac1fe293d599bfu, 0xc6f14cd848405530u}, /* -177 */
    {0xa21727db38cb002fu, 0xb8ada00e5a506a7cu}, /* -176 */
    {0xca9cf1d206fdc03bu, 0xa6d90811f0e4851cu}, /* -175 */
    {0xfd442e4688bd304au, 0x908f4a166d1da663u}, /* -174 */
    {0x9e4a9cec15763e2eu, 0x9a598e4e043287feu}, /* -173 */
    {0xc5dd44271ad3cdbau, 0x40eff1e1853f29fdu}, /* -172 */
    {0xf7549530e188c128u, 0xd12bee59e68ef47cu}, /* -171 */
    {0x9a94dd3e8cf578b9u, 0x82bb74f8301958ceu}, /* -170 */
    {0xc13a148e3032d6e7u, 0xe36a52363c1faf01u}, /* -169 */
    {0xf18899b1bc3f8ca1u, 0xdc44e6c3cb279ac1u}, /* -168 */
    {0x96f5600f15a7b7e5u, 0x29ab103a5ef8c0b9u}, /* -167 */
    {0xbcb2b812db11a5deu, 0x7415d448f6b6f0e7u}, /* -166 */
    {0xebdf661791d60f56u, 0x111b495b3464ad21u}, /* -165 */
    {0x936b9fcebb25c995u, 0xcab10dd900beec34u}, /* -164 */
    {0xb84687c269ef3bfbu, 0x3d5d514f40eea742u}, /* -163 */
    {0xe65829b3046b0afau, 0x0cb4a5a3112a5112u}, /* -162 */
    {0x8ff71a0fe2c2e6dcu, 0x47f0e785eaba72abu}, /* -161 */
    {0xb3f4e093db73a093u, 0x59ed216765690f56u}, /* -160 */
    {0xe0f218b8d25088b8u, 0x306869c13ec3532cu}, /* -159 */
    {0x8c974f7383725573u, 0x1e414218c73a13fbu}, /* -158 */
    {0xafbd2350644eeacfu, 0xe5d1929ef90898fau}, /* -157 */
    {0xdbac6c247d62a583u, 0xdf45f746b74abf39u}, /* -156 */
    {0x894bc396ce5da772u, 0x6b8bba8c328eb783u}, /* -155 */
    {0xab9eb47c81f5114fu, 0x066ea92f3f326564u}, /* -154 */
    {0xd686619ba27255a2u, 0xc80a537b0efefebdu}, /* -153 */
    {0x8613fd0145877585u, 0xbd06742ce95f5f36u}, /* -152 */
    {0xa798fc4196e952e7u, 0x2c48113823b73704u}, /* -151 */
    {0xd17f3b51fca3a7a0u, 0xf75a15862ca504c5u}, /* -150 */
    {0x82ef85133de648c4u, 0x9a984d73dbe722fbu}, /* -149 */
    {0xa3ab66580d5fdaf5u, 0xc13e60d0d2e0ebbau}, /* -148 */
    {0xcc963fee10b7d1b3u, 0x318df905079926a8u}, /* -147 */
    {0xffbbcfe994e5c61fu, 0xfdf17746497f7052u}, /* -146 */
    {0x9fd561f1fd0f9bd3u, 0xfeb6ea8bedefa633u}, /* -145 */
    {0xc7caba6e7c5382c8u, 0xfe64a52ee96b8fc0u}, /* -144 */
    {0xf9bd690a1b68637bu, 0x3dfdce7aa3c673b0u}, /* -143 */
    {0x9c1661a651213e2du, 0x06bea10ca65c084eu}, /* -142 */
    {0xc31bfa0fe5698db8u, 0x486e494fcff30a62u}, /* -141 */
    {0xf3e2f893dec3f126u, 0x5a89dba3c3efccfau}, /* -140 */
    {0x986ddb5c6b3a76b7u, 0xf89629465a75e01cu}, /* -139 */
    {0xbe89523386091465u, 0xf6bbb397f1135823u}, /* -138 */
    {0xee2ba6c0678b597fu, 0x746aa07ded582e2cu}, /* -137 */
    {0x94db483840b717efu, 0xa8c2a44eb4571cdcu}, /* -136 */
    {0xba121a4650e4ddebu, 0x92f34d62616ce413u}, /* -135 */
    {0xe896a0d7e51e1566u, 0x77b020baf9c81d17u}, /* -134 */
    {0x915e2486ef32cd60u, 0x0ace1474dc1d122eu}, /* -133 */
    {0xb5b5ada8aaff80b8u, 0x0d819992132456bau}, /* -132 */
    {0xe3231912d5bf60e6u, 0x10e1fff697ed6c69u}, /* -131 */
    {0x8df5efabc5979c8fu, 0xca8d3ffa1ef463c1u}, /* -130 */
    {0xb1736b96b6fd83b3u, 0xbd308ff8a6b17cb2u}, /* -129 */
    {0xddd0467c64bce4a0u, 0xac7cb3f6d05ddbdeu}, /* -128 */
    {0x8aa22c0dbef60ee4u, 0x6bcdf07a423aa96bu}, /* -127 */
    {0xad4ab7112eb3929du, 0x86c16c98d2c953c6u}, /* -126 */
    {0xd89d64d57a607744u, 0xe871c7bf077ba8b7u}, /* -125 */
    {0x87625f056c7c4a8bu, 0x11471cd764ad4972u}, /* -124 */
    {0xa93af6c6c79b5d2du, 0xd598e40d3dd89bcfu}, /* -123 */
    {0xd389b47879823479u, 0x4aff1d108d4ec2c3u}, /* -122 */
    {0x843610cb4bf160cbu, 0xcedf722a585139bau}, /* -121 */
    {0xa54394fe1eedb8feu, 0xc2974eb4ee658828u}, /* -120 */
    {0xce947a3da6a9273eu, 0x733d226229feea32u}, /* -119 */
    {0x811ccc668829b887u, 0x0806357d5a3f525fu}, /* -118 */
    {0xa163ff802a3426a8u, 0xca07c2dcb0cf26f7u}, /* -117 */
    {0xc9bcff6034c13052u, 0xfc89b393dd02f0b5u}, /* -116 */
    {0xfc2c3f3841f17c67u, 0xbbac2078d443ace2u}, /* -115 */
    {0x9d9ba7832936edc0u, 0xd54b944b84aa4c0du}, /* -114 */
    {0xc5029163f384a931u, 0x0a9e795e65d4df11u}, /* -113 */
    {0xf64335bcf065d37du, 0x4d4617b5ff4a16d5u}, /* -112 */
    {0x99ea0196163fa42eu, 0x504bced1bf8e4e45u}, /* -111 */
    {0xc06481fb9bcf8d39u, 0xe45ec2862f71e1d6u}, /* -110 */
    {0xf07da27a82c37088u, 0x5d767327bb4e5a4cu}, /* -109 */
    {0x964e858c91ba2655u, 0x3a6a07f8d510f86fu}, /* -108 */
    {0xbbe226efb628afeau, 0x890489f70a55368bu}, /* -107 */
    {0xeadab0aba3b2dbe5u, 0x2b45ac74ccea842eu}, /* -106 */
    {0x92c8ae6b464fc96fu, 0x3b0b8bc90012929du}, /* -105 */
    {0xb77ada0617e3bbcbu, 0x09ce6ebb40173744u}, /* -104 */
    {0xe55990879ddcaabdu, 0xcc420a6a101d0515u}, /* -103 */
    {0x8f57fa54c2a9eab6u, 0x9fa946824a12232du}, /* -102 */
    {0xb32df8e9f3546564u, 0x47939822dc96abf9u}, /* -101 */
    {0xdff9772470297ebdu, 0x59787e2b93bc56f7u}, /* -100 */
    {0x8bfbea76c619ef36u, 0x57eb4edb3c55b65au}, /* -99 */
    {0xaefae51477a06b03u, 0xede622920b6b23f1u}, /* -98 */
    {0xdab99e59958885c4u, 0xe95fab368e45ecedu}, /* -97 */
    {0x88b402f7fd75539bu, 0x11dbcb0218ebb414u}, /* -96 */
    {0xaae103b5fcd2a881u, 0xd652bdc29f26a119u}, /* -95 */
    {0xd59944a37c0752a2u, 0x4be76d3346f0495fu}, /* -94 */
    {0x857fcae62d8493a5u, 0x6f70a4400c562ddbu}, /* -93 */
    {0xa6dfbd9fb8e5b88eu, 0xcb4ccd500f6bb952u}, /* -92 */
    {0xd097ad07a71f26b2u, 0x7e2000a41346a7a7u}, /* -91 */
    {0x825ecc24c873782fu, 0x8ed400668c0c28c8u}, /* -90 */
    {0xa2f67f2dfa90563bu, 0x728900802f0f32fau}, /* -89 */
    {0xcbb41ef979346bcau, 0x4f2b40a03ad2ffb9u}, /* -88 */
    {0xfea126b7d78186bcu, 0xe2f610c84987bfa8u}, /* -87 */
    {0x9f24b832e6b0f436u, 0x0dd9ca7d2df4d7c9u}, /* -86 */
    {0xc6ede63fa05d3143u, 0x91503d1c79720dbbu}, /* -85 */
    {0xf8a95fcf88747d94u, 0x75a44c6397ce912au}, /* -84 */
    {0x9b69dbe1b548ce7cu, 0xc986afbe3ee11abau}, /* -83 */
    {0xc24452da229b021bu, 0xfbe85badce996168u}, /* -82 */
    {0xf2d56790ab41c2a2u, 0xfae27299423fb9c3u}, /* -81 */
    {0x97c560ba6b0919a5u, 0xdccd879fc967d41au}, /* -80 */
    {0xbdb6b8e905cb600fu, 0x5400e987bbc1c920u}, /* -79 */
    {0xed246723473e3813u, 0x290123e9aab23b68u}, /* -78 */
    {0x9436c0760c86e30bu, 0xf9a0b6720aaf6521u}, /* -77 */
    {0xb94470938fa89bceu, 0xf808e40e8d5b3e69u}, /* -76 */
    {0xe7958cb87392c2c2u, 0xb60b1d1230b20e04u}, /* -75 */
    {0x90bd77f3483bb9b9u, 0xb1c6f22b5e6f48c2u}, /* -74 */
    {0xb4ecd5f01a4aa828u, 0x1e38aeb6360b1af3u}, /* -73 */
    {0xe2280b6c20dd5232u, 0x25c6da63c38de1b0u}, /* -72 */
    {0x8d590723948a535fu, 0x579c487e5a38ad0eu}, /* -71 */
    {0xb0af48ec79ace837u, 0x2d835a9df0c6d851u}, /* -70 */
    {0xdcdb1b2798182244u, 0xf8e431456cf88e65u}, /* -69 */
    {0x8a08f0f8bf0f156bu, 0x1b8e9ecb641b58ffu}, /* -68 */
    {0xac8b2d36eed2dac5u, 0xe272467e3d222f3fu}, /* -67 */
    {0xd7adf884aa879177u, 0x5b0ed81dcc6abb0fu}, /* -66 */
    {0x86ccbb52ea94baeau, 0x98e947129fc2b4e9u}, /* -65 */
    {0xa87fea27a539e9a5u, 0x3f2398d747b36224u}, /* -64 */
    {0xd29fe4b18e88640eu, 0x8eec7f0d19a03aadu}, /* -63 */
    {0x83a3eeeef9153e89u, 0x1953cf68300424acu}, /* -62 */
    {0xa48ceaaab75a8e2bu, 0x5fa8c3423c052dd7u}, /* -61 */
    {0xcdb02555653131b6u, 0x3792f412cb06794du}, /* -60 */
    {0x808e17555f3ebf11u, 0xe2bbd88bbee40bd0u}, /* -59 */
    {0xa0b19d2ab70e6ed6u, 0x5b6aceaeae9d0ec4u}, /* -58 */
    {0xc8de047564d20a8bu, 0xf245825a5a445275u}, /* -57 */
    {0xfb158592be068d2eu, 0xeed6e2f0f0d56712u}, /* -56 */
    {0x9ced737bb6c4183du, 0x55464dd69685606bu}, /* -55 */
    {0xc428d05aa4751e4cu, 0xaa97e14c3c26b886u}, /* -54 */
    {0xf53304714d9265dfu, 0xd53dd99f4b3066a8u}, /* -53 */
    {0x993fe2c6d07b7fabu, 0xe546a8038efe4029u}, /* -52 */
    {0xbf8fdb78849a5f96u, 0xde98520472bdd033u}, /* -51 */
    {0xef73d256a5c0f77cu, 0x963e66858f6d4440u}, /* -50 */
    {0x95a8637627989aadu, 0xdde7001379a44aa8u}, /* -49 */
    {0xbb127c53b17ec159u, 0x5560c018580d5d52u}, /* -48 */
    {0xe9d71b689dde71afu, 0xaab8f01e6e10b4a6u}, /* -47 */
    {0x9226712162ab070du, 0xcab3961304ca70e8u}, /* -46 */
    {0xb6b00d69bb55c8d1u, 0x3d607b97c5fd0d22u}, /* -45 */
    {0xe45c10c42a2b3b05u, 0x8cb89a7db77c506au}, /* -44 */
    {0x8eb98a7a9a5b04e3u, 0x77f3608e92adb242u}, /* -43 */
    {0xb267ed1940f1c61cu, 0x55f038b237591ed3u}, /* -42 */
    {0xdf01e85f912e37a3u, 0x6b6c46dec52f6688u}, /* -41 */
    {0x8b61313bbabce2c6u, 0x2323ac4b3b3da015u}, /* -40 */
    {0xae397d8aa96c1b77u, 0xabec975e0a0d081au}, /* -39 */
    {0xd9c7dced53c72255u, 0x96e7bd358c904a21u}, /* -38 */
    {0x881cea14545c7575u, 0x7e50d64177da2e54u}, /* -37 */
    {0xaa242499697392d2u, 0xdde50bd1d5d0b9e9u}, /* -36 */
    {0xd4ad2dbfc3d07787u, 0x955e4ec64b44e864u}, /* -35 */
    {0x84ec3c97da624ab4u, 0xbd5af13bef0b113eu}, /* -34 */
    {0xa6274bbdd0fadd61u, 0xecb1ad8aeacdd58eu}, /* -33 */
    {0xcfb11ead453994bau, 0x67de18eda5814af2u}, /* -32 */
    {0x81ceb32c4b43fcf4u, 0x80eacf948770ced7u}, /* -31 */
    {0xa2425ff75e14fc31u, 0xa1258379a94d028du}, /* -30 */
    {0xcad2f7f5359a3b3eu, 0x096ee45813a04330u}, /* -29 */
    {0xfd87b5f28300ca0du, 0x8bca9d6e188853fcu}, /* -28 */
    {0x9e74d1b791e07e48u, 0x775ea264cf55347du}, /* -27 */
    {0xc612062576589ddau, 0x95364afe032a819du}, /* -26 */
    {0xf79687aed3eec551u, 0x3a83ddbd83f52204u}, /* -25 */
    {0x9abe14cd44753b52u, 0xc4926a9672793542u}, /* -24 */
    {0xc16d9a0095928a27u, 0x75b7053c0f178293u}, /* -23 */
    {0xf1c90080baf72cb1u, 0x5324c68b12dd6338u}, /* -22 */
    {0x971da05074da7beeu, 0xd3f6fc16ebca5e03u}, /* -21 */
    {0xbce5086492111aeau, 0x88f4bb1ca6bcf584u}, /* -20 */
    {0xec1e4a7db69561a5u, 0x2b31e9e3d06c32e5u}, /* -19 */
    {0x9392ee8e921d5d07u, 0x3aff322e62439fcfu}, /* -18 */
    {0xb877aa3236a4b449u, 0x09befeb9fad487c2u}, /* -17 */
    {0xe69594bec44de15bu, 0x4c2ebe687989a9b3u}, /* -16 */
    {0x901d7cf73ab0acd9u, 0x0f9d37014bf60a10u}, /* -15 */
    {0xb424dc35095cd80fu, 0x538484c19ef38c94u}, /* -14 */
    {0xe12e13424bb40e13u, 0x2865a5f206b06fb9u}, /* -13 */
    {0x8cbccc096f5088cbu, 0xf93f87b7442e45d3u}, /* -12 */
    {0xafebff0bcb24aafeu, 0xf78f69a51539d748u}, /* -11 */
    {0xdbe6fecebdedd5beu, 0xb573440e5a884d1bu}, /* -10 */
    {0x89705f4136b4a597u, 0x31680a88f8953030u}, /* -9 */
    {0xabcc77118461cefcu, 0xfdc20d2b36ba7c3du}, /* -8 */
    {0xd6bf94d5e57a42bcu, 0x3d32907604691b4cu}, /* -7 */
    {0x8637bd05af6c69b5u, 0xa63f9a49c2c1b10fu}, /* -6 */
    {0xa7c5ac471b478423u, 0x0fcf80dc33721d53u}, /* -5 */
    {0xd1b71758e219652bu, 0xd3c36113404ea4a8u}, /* -4 */
    {0x83126e978d4fdf3bu, 0x645a1cac083126e9u}, /* -3 */
    {0xa3d70a3d70a3d70au, 0x3d70a3d70a3d70a3u}, /* -2 */
    {0xccccccccccccccccu, 0xccccccccccccccccu}, /* -1 */
    {0x8000000000000000u, 0x0000000000000000u}, /* 0 */
    {0xa000000000000000u, 0x0000000000000000u}, /* 1 */
    {0xc800000000000000u, 0x0000000000000000u}, /* 2 */
    {0xfa00000000000000u, 0x0000000000000000u}, /* 3 */
    {0x9c40000000000000u, 0x0000000000000000u}, /* 4 */
    {0xc350000000000000u, 0x0000000000000000u}, /* 5 */
    {0xf424000000000000u, 0x0000000000000000u}, /* 6 */
    {0x9896800000000000u, 0x0000000000000000u}, /* 7 */
    {0xbebc200000000000u, 0x0000000000000000u}, /* 8 */
    {0xee6b280000000000u, 0x0000000000000000u}, /* 9 */
    {0x9502f90000000000u, 0x0000000000000000u}, /* 10 */
    {0xba43b74000000000u, 0x0000000000000000u}, /* 11 */
    {0xe8d4a51000000000u, 0x0000000000000000u}, /* 12 */
    {0x9184e72a00000000u, 0x0000000000000000u}, /* 13 */
    {0xb5e620f480000000u, 0x0000000000000000u}, /* 14 */
    {0xe35fa931a0000000u, 0x0000000000000000u}, /* 15 */
    {0x8e1bc9bf04000000u, 0x0000000000000000u}, /* 16 */
    {0xb1a2bc2ec5000000u, 0x0000000000000000u}, /* 17 */
    {0xde0b6b3a76400000u, 0x0000000000000000u}, /* 18 */
    {0x8ac7230489e80000u, 0x0000000000000000u}, /* 19 */
    {0xad78ebc5ac620000u, 0x0000000000000000u}, /* 20 */
    {0xd8d726b7177a8000u, 0x0000000000000000u}, /* 21 */
    {0x878678326eac9000u, 0x0000000000000000u}, /* 22 */
    {0xa968163f0a57b400u, 0x0000000000000000u}, /* 23 */
    {0xd3c21bcecceda100u, 0x0000000000000000u}, /* 24 */
    {0x84595161401484a0u, 0x0000000000000000u}, /* 25 */
    {0xa56fa5b99019a5c8u, 0x0000000000000000u}, /* 26 */
    {0xcecb8f27f4200f3au, 0x0000000000000000u}, /* 27 */
    {0x813f3978f8940984u, 0x4000000000000000u}, /* 28 */
    {0xa18f07d736b90be5u, 0x5000000000000000u}, /* 29 */
    {0xc9f2c9cd04674edeu, 0xa400000000000000u}, /* 30 */
    {0xfc6f7c4045812296u, 0x4d00000000000000u}, /* 31 */
    {0x9dc5ada82b70b59du, 0xf020000000000000u}, /* 32 */
    {0xc5371912364ce305u, 0x6c28000000000000u}, /* 33 */
    {0xf684df56c3e01bc6u, 0xc732000000000000u}, /* 34 */
    {0x9a130b963a6c115cu, 0x3c7f400000000000u}, /* 35 */
    {0xc097ce7bc90715b3u, 0x4b9f100000000000u}, /* 36 */
    {0xf0bdc21abb48db20u, 0x1e86d40000000000u}, /* 37 */
    {0x96769950b50d88f4u, 0x1314448000000000u}, /* 38 */
    {0xbc143fa4e250eb31u, 0x17d955a000000000u}, /* 39 */
    {0xeb194f8e1ae525fdu, 0x5dcfab0800000000u}, /* 40 */
    {0x92efd1b8d0cf37beu, 0x5aa1cae500000000u}, /* 41 */
    {0xb7abc627050305adu, 0xf14a3d9e40000000u}, /* 42 */
    {0xe596b7b0c643c719u, 0x6d9ccd05d0000000u}, /* 43 */
    {0x8f7e32ce7bea5c6fu, 0xe4820023a2000000u}, /* 44 */
    {0xb35dbf821ae4f38bu, 0xdda2802c8a800000u}, /* 45 */
    {0xe0352f62a19e306eu, 0xd50b2037ad200000u}, /* 46 */
    {0x8c213d9da502de45u, 0x4526f422cc340000u}, /* 47 */
    {0xaf298d050e4395d6u, 0x9670b12b7f410000u}, /* 48 */
    {0xdaf3f04651d47b4cu, 0x3c0cdd765f114000u}, /* 49 */
    {0x88d8762bf324cd0fu, 0xa5880a69fb6ac800u}, /* 50 */
    {0xab0e93b6efee0053u, 0x8eea0d047a457a00u}, /* 51 */
    {0xd5d238a4abe98068u, 0x72a4904598d6d880u}, /* 52 */
    {0x85a36366eb71f041u, 0x47a6da2b7f864750u}, /* 53 */
    {0xa70c3c40a64e6c51u, 0x999090b65f67d924u}, /* 54 */
    {0xd0cf4b50cfe20765u, 0xfff4b4e3f741cf6du}, /* 55 */
    {0x82818f1281ed449fu, 0xbff8f10e7a8921a4u}, /* 56 */
    {0xa321f2d7226895c7u, 0xaff72d52192b6a0du}, /* 57 */
    {0xcbea6f8ceb02bb39u, 0x9bf4f8a69f764490u}, /* 58 */
    {0xfee50b7025c36a08u, 0x02f236d04753d5b4u}, /* 59 */
    {0x9f4f2726179a2245u, 0x01d762422c946590u}, /* 60 */
    {0xc722f0ef9d80aad6u, 0x424d3ad2b7b97ef5u}, /* 61 */
    {0xf8ebad2b84e0d58bu, 0xd2e0898765a7deb2u}, /* 62 */
    {0x9b934c3b330c8577u, 0x63cc55f49f88eb2fu}, /* 63 */
    {0xc2781f49ffcfa6d5u, 0x3cbf6b71c76b25fbu}, /* 64 */
    {0xf316271c7fc3908au, 0x8bef464e3945ef7au}, /* 65 */
    {0x97edd871cfda3a56u, 0x97758bf0e3cbb5acu}, /* 66 */
    {0xbde94e8e43d0c8ecu, 0x3d52eeed1cbea317u}, /* 67 */
    {0xed63a231d4c4fb27u, 0x4ca7aaa863ee4bddu}, /* 68 */
    {0x945e455f24fb1cf8u, 0x8fe8caa93e74ef6au}, /* 69 */
    {0xb975d6b6ee39e436u, 0xb3e2fd538e122b44u}, /* 70 */
    {0xe7d34c64a9c85d44u, 0x60dbbca87196b616u}, /* 71 */
    {0x90e40fbeea1d3a4au, 0xbc8955e946fe31cdu}, /* 72 */
    {0xb51d13aea4a488ddu, 0x6babab6398bdbe41u}, /* 73 */
    {0xe264589a4dcdab14u, 0xc696963c7eed2dd1u}, /* 74 */
    {0x8d7eb76070a08aecu, 0xfc1e1de5cf543ca2u}, /* 75 */
    {0xb0de65388cc8ada8u, 0x3b25a55f43294bcbu}, /* 76 */
    {0xdd15fe86affad912u, 0x49ef0eb713f39ebeu}, /* 77 */
    {0x8a2dbf142dfcc7abu, 0x6e3569326c784337u}, /* 78 */
    {0xacb92ed9397bf996u, 0x49c2c37f07965404u}, /* 79 */
    {0xd7e77a8f87daf7fbu, 0xdc33745ec97be906u}, /* 80 */
    {0x86f0ac99b4e8dafdu, 0x69a028bb3ded71a3u}, /* 81 */
    {0xa8acd7c0222311bcu, 0xc40832ea0d68ce0cu}, /* 82 */
    {0xd2d80db02aabd62bu, 0xf50a3fa490c30190u}, /* 83 */
    {0x83c7088e1aab65dbu, 0x792667c6da79e0fau}, /* 84 */
    {0xa4b8cab1a1563f52u, 0x577001b891185938u}, /* 85 */
    {0xcde6fd5e09abcf26u, 0xed4c0226b55e6f86u}, /* 86 */
    {0x80b05e5ac60b6178u, 0x544f8158315b05b4u}, /* 87 */
    {0xa0dc75f1778e39d6u, 0x696361ae3db1c721u}, /* 88 */
    {0xc913936dd571c84cu, 0x03bc3a19cd1e38e9u}, /* 89 */
    {0xfb5878494ace3a5fu, 0x04ab48a04065c723u}, /* 90 */
    {0x9d174b2dcec0e47bu, 0x62eb0d64283f9c76u}, /* 91 */
    {0xc45d1df942711d9au, 0x3ba5d0bd324f8394u}, /* 92 */
    {0xf5746577930d6500u, 0xca8f44ec7ee36479u}, /* 93 */
    {0x9968bf6abbe85f20u, 0x7e998b13cf4e1ecbu}, /* 94 */
    {0xbfc2ef456ae276e8u, 0x9e3fedd8c321a67eu}, /* 95 */
    {0xefb3ab16c59b14a2u, 0xc5cfe94ef3ea101eu}, /* 96 */
    {0x95d04aee3b80ece5u, 0xbba1f1d158724a12u}, /* 97 */
    {0xbb445da9ca61281fu, 0x2a8a6e45ae8edc97u}, /* 98 */
    {0xea1575143cf97226u, 0xf52d09d71a3293bdu}, /* 99 */
    {0x924d692ca61be758u, 0x593c2626705f9c56u}, /* 100 */
    {0xb6e0c377cfa2e12eu, 0x6f8b2fb00c77836cu}, /* 101 */
    {0xe498f455c38b997au, 0x0b6dfb9c0f956447u}, /* 102 */
    {0x8edf98b59a373fecu, 0x4724bd4189bd5eacu}, /* 103 */
    {0xb2977ee300c50fe7u, 0x58edec91ec2cb657u}, /* 104 */
    {0xdf3d5e9bc0f653e1u, 0x2f2967b66737e3edu}, /* 105 */
    {0x8b865b215899f46cu, 0xbd79e0d20082ee74u}, /* 106 */
    {0xae67f1e9aec07187u, 0xecd8590680a3aa11u}, /* 107 */
    {0xda01ee641a708de9u, 0xe80e6f4820cc9495u}, /* 108 */
    {0x884134fe908658b2u, 0x3109058d147fdcddu}, /* 109 */
    {0xaa51823e34a7eedeu, 0xbd4b46f0599fd415u}, /* 110 */
    {0xd4e5e2cdc1d1ea96u, 0x6c9e18ac7007c91au}, /* 111 */
    {0x850fadc09923329eu, 0x03e2cf6bc604ddb0u}, /* 112 */
    {0xa6539930bf6bff45u, 0x84db8346b786151cu}, /* 113 */
    {0xcfe87f7cef46ff16u, 0xe612641865679a63u}, /* 114 */
    {0x81f14fae158c5f6eu, 0x4fcb7e8f3f60c07eu}, /* 115 */
    {0xa26da3999aef7749u, 0xe3be5e330f38f09du}, /* 116 */
    {0xcb090c8001ab551cu, 0x5cadf5bfd3072cc5u}, /* 117 */
    {0xfdcb4fa002162a63u, 0x73d9732fc7c8f7f6u}, /* 118 */
    {0x9e9f11c4014dda7eu, 0x2867e7fddcdd9afau}, /* 119 */
    {0xc646d63501a1511du, 0xb281e1fd541501b8u}, /* 120 */
    {0xf7d88bc24209a565u, 0x1f225a7ca91a4226u}, /* 121 */
    {0x9ae757596946075fu, 0x3375788de9b06958u}, /* 122 */
    {0xc1a12d2fc3978937u, 0x0052d6b1641c83aeu}, /* 123 */
    {0xf209787bb47d6b84u, 0xc0678c5dbd23a49au}, /* 124 */
    {0x9745eb4d50ce6332u, 0xf840b7ba963646e0u}, /* 125 */
    {0xbd176620a501fbffu, 0xb650e5a93bc3d898u}, /* 126 */
    {0xec5d3fa8ce427affu, 0xa3e51f138ab4cebeu}, /* 127 */
    {0x93ba47c980e98cdfu, 0xc66f336c36b10137u}, /* 128 */
    {0xb8a8d9bbe123f017u, 0xb80b0047445d4184u}, /* 129 */
    {0xe6d3102ad96cec1du, 0xa60dc059157491e5u}, /* 130 */
    {0x9043ea1ac7e41392u, 0x87c89837ad68db2fu}, /* 131 */
    {0xb454e4a179dd1877u, 0x29babe4598c311fbu}, /* 132 */
    {0xe16a1dc9d8545e94u, 0xf4296dd6fef3d67au}, /* 133 */
    {0x8ce2529e2734bb1du, 0x1899e4a65f58660cu}, /* 134 */
    {0xb01ae745b101e9e4u, 0x5ec05dcff72e7f8fu}, /* 135 */
    {0xdc21a1171d42645du, 0x76707543f4fa1f73u}, /* 136 */
    {0x899504ae72497ebau, 0x6a06494a791c53a8u}, /* 137 */
    {0xabfa45da0edbde69u, 0x0487db9d17636892u}, /* 138 */
    {0xd6f8d7509292d603u, 0x45a9d2845d3c42b6u}, /* 139 */
    {0x865b86925b9bc5c2u, 0x0b8a2392ba45a9b2u}, /* 140 */
    {0xa7f26836f282b732u, 0x8e6cac7768d7141eu}, /* 141 */
    {0xd1ef0244af2364ffu, 0x3207d795430cd926u}, /* 142 */
    {0x8335616aed761f1fu, 0x7f44e6bd49e807b8u}, /* 143 */
    {0xa402b9c5a8d3a6e7u, 0x5f16206c9c6209a6u}, /* 144 */
    {0xcd036837130890a1u, 0x36dba887c37a8c0fu}, /* 145 */
    {0x802221226be55a64u, 0xc2494954da2c9789u}, /* 146 */
    {0xa02aa96b06deb0fdu, 0xf2db9baa10b7bd6cu}, /* 147 */
    {0xc83553c5c8965d3du, 0x6f92829494e5acc7u}, /* 148 */
    {0xfa42a8b73abbf48cu, 0xcb772339ba1f17f9u}, /* 149 */
    {0x9c69a97284b578d7u, 0xff2a760414536efbu}, /* 150 */
    {0xc38413cf25e2d70du, 0xfef5138519684abau}, /* 151 */
    {0xf46518c2ef5b8cd1u, 0x7eb258665fc25d69u}, /* 152 */
    {0x98bf2f79d5993802u, 0xef2f773ffbd97a61u}, /* 153 */
    {0xbeeefb584aff8603u, 0xaafb550ffacfd8fau}, /* 154 */
    {0xeeaaba2e5dbf6784u, 0x95ba2a53f983cf38u}, /* 155 */
    {0x952ab45cfa97a0b2u, 0xdd945a747bf26183u}, /* 156 */
    {0xba756174393d88dfu, 0x94f971119aeef9e4u}, /* 157 */
    {0xe912b9d1478ceb17u, 0x7a37cd5601aab85du}, /* 158 */
    {0x91abb422ccb812eeu, 0xac62e055c10ab33au}, /* 159 */
    {0xb616a12b7fe617aau, 0x577b986b314d6009u}, /* 160 */
    {0xe39c49765fdf9d94u, 0xed5a7e85fda0b80bu}, /* 161 */
    {0x8e41ade9fbebc27du, 0x14588f13be847307u}, /* 162 */
    {0xb1d219647ae6b31cu, 0x596eb2d8ae258fc8u}, /* 163 */
    {0xde469fbd99a05fe3u, 0x6fca5f8ed9aef3bbu}, /* 164 */
    {0x8aec23d680043beeu, 0x25de7bb9480d5854u}, /* 165 */
    {0xada72ccc20054ae9u, 0xaf561aa79a10ae6au}, /* 166 */
    {0xd910f7ff28069da4u, 0x1b2ba1518094da04u}, /* 167 */
    {0x87aa9aff79042286u, 0x90fb44d2f05d0842u}, /* 168 */
    {0xa99541bf57452b28u, 0x353a1607ac744a53u}, /* 169 */
    {0xd3fa922f2d1675f2u, 0x42889b8997915ce8u}, /* 170 */
    {0x847c9b5d7c2e09b7u, 0x69956135febada11u}, /* 171 */
    {0xa59bc234db398c25u, 0x43fab9837e699095u}, /* 172 */
    {0xcf02b2c21207ef2eu, 0x94f967e45e03f4bbu}, /* 173 */
    {0x8161afb94b44f57du, 0x1d1be0eebac278f5u}, /* 174 */
    {0xa1ba1ba79e1632dcu, 0x6462d92a69731732u}, /* 175 */
    {0xca28a291859bbf93u, 0x7d7b8f7503cfdcfeu}, /* 176 */
    {0xfcb2cb35e702af78u, 0x5cda735244c3d43eu}, /* 177 */
    {0x9defbf01b061adabu, 0x3a0888136afa64a7u}, /* 178 */
    {0xc56baec21c7a1916u, 0x088aaa1845b8fdd0u}, /* 179 */
    {0xf6c69a72a3989f5bu, 0x8aad549e57273d45u}, /* 180 */
    {0x9a3c2087a63f6399u, 0x36ac54e2f678864bu}, /* 181 */
    {0xc0cb28a98fcf3c7fu, 0x84576a1bb416a7ddu}, /* 182 */
    {0xf0fdf2d3f3c30b9fu, 0x656d44a2a11c51d5u}, /* 183 */
    {0x969eb7c47859e743u, 0x9f644ae5a4b1b325u}, /* 184 */
    {0xbc4665b596706114u, 0x873d5d9f0dde1feeu}, /* 185 */
    {0xeb57ff22fc0c7959u, 0xa90cb506d155a7eau}, /* 186 */
    {0x9316ff75dd87cbd8u, 0x09a7f12442d588f2u}, /* 187 */
    {0xb7dcbf5354e9beceu, 0x0c11ed6d538aeb2fu}, /* 188 */
    {0xe5d3ef282a242e81u, 0x8f1668c8a86da5fau}, /* 189 */
    {0x8fa475791a569d10u, 0xf96e017d694487bcu}, /* 190 */
    {0xb38d92d760ec4455u, 0x37c981dcc395a9acu}, /* 191 */
    {0xe070f78d3927556au, 0x85bbe253f47b1417u}, /* 192 */
    {0x8c469ab843b89562u, 0x93956d7478ccec8eu}, /* 193 */
    {0xaf58416654a6babbu, 0x387ac8d1970027b2u}, /* 194 */
    {0xdb2e51bfe9d0696au, 0x06997b05fcc0319eu}, /* 195 */
    {0x88fcf317f22241e2u, 0x441fece3bdf81f03u}, /* 196 */
    {0xab3c2fddeeaad25au, 0xd527e81cad7626c3u}, /* 197 */
    {0xd60b3bd56a5586f1u, 0x8a71e223d8d3b074u}, /* 198 */
    {0x85c7056562757456u, 0xf6872d5667844e49u}, /* 199 */
    {0xa738c6bebb12d16cu, 0xb428f8ac016561dbu}, /* 200 */
    {0xd106f86e69d785c7u, 0xe13336d701beba52u}, /* 201 */
    {0x82a45b450226b39cu, 0xecc0024661173473u}, /* 202 */
    {0xa34d721642b06084u, 0x27f002d7f95d0190u}, /* 203 */
    {0xcc20ce9bd35c78a5u, 0x31ec038df7b441f4u}, /* 204 */
    {0xff290242c83396ceu, 0x7e67047175a15271u}, /* 205 */
    {0x9f79a169bd203e41u, 0x0f0062c6e984d386u}, /* 206 */
    {0xc75809c42c684dd1u, 0x52c07b78a3e60868u}, /* 207 */
    {0xf92e0c3537826145u, 0xa7709a56ccdf8a82u}, /* 208 */
    {0x9bbcc7a142b17ccbu, 0x88a66076400bb691u}, /* 209 */
    {0xc2abf989935ddbfeu, 0x6acff893d00ea435u}, /* 210 */
    {0xf356f7ebf83552feu, 0x0583f6b8c4124d43u}, /* 211 */
    {0x98165af37b2153deu, 0xc3727a337a8b704au}, /* 212 */
    {0xbe1bf1b059e9a8d6u, 0x744f18c0592e4c5cu}, /* 213 */
    {0xeda2ee1c7064130cu, 0x1162def06f79df73u}, /* 214 */
    {0x9485d4d1c63e8be7u, 0x8addcb5645ac2ba8u}, /* 215 */
    {0xb9a74a0637ce2ee1u, 0x6d953e2bd7173692u}, /* 216 */
    {0xe8111c87c5c1ba99u, 0xc8fa8db6ccdd0437u}, /* 217 */
    {0x910ab1d4db9914a0u, 0x1d9c9892400a22a2u}, /* 218 */
    {0xb54d5e4a127f59c8u, 0x2503beb6d00cab4bu}, /* 219 */
    {0xe2a0b5dc971f303au, 0x2e44ae64840fd61du}, /* 220 */
    {0x8da471a9de737e24u, 0x5ceaecfed289e5d2u}, /* 221 */
    {0xb10d8e1456105dadu, 0x7425a83e872c5f47u}, /* 222 */
    {0xdd50f1996b947518u, 0xd12f124e28f77719u}, /* 223 */
    {0x8a5296ffe33cc92fu, 0x82bd6b70d99aaa6fu}, /* 224 */
    {0xace73cbfdc0bfb7bu, 0x636cc64d1001550bu}, /* 225 */
    {0xd8210befd30efa5au, 0x3c47f7e05401aa4eu}, /* 226 */
    {0x8714a775e3e95c78u, 0x65acfaec34810a71u}, /* 227 */
    {0xa8d9d1535ce3b396u, 0x7f1839a741a14d0du}, /* 228 */
    {0xd31045a8341ca07cu, 0x1ede48111209a050u}, /* 229 */
    {0x83ea2b892091e44du, 0x934aed0aab460432u}, /* 230 */
    {0xa4e4b66b68b65d60u, 0xf81da84d5617853fu}, /* 231 */
    {0xce1de40642e3f4b9u, 0x36251260ab9d668eu}, /* 232 */
    {0x80d2ae83e9ce78f3u, 0xc1d72b7c6b426019u}, /* 233 */
    {0xa1075a24e4421730u, 0xb24cf65b8612f81fu}, /* 234 */
    {0xc94930ae1d529cfcu, 0xdee033f26797b627u}, /* 235 */
    {0xfb9b7cd9a4a7443cu, 0x169840ef017da3b1u}, /* 236 */
    {0x9d412e0806e88aa5u, 0x8e1f289560ee864eu}, /* 237 */
    {0xc491798a08a2ad4eu, 0xf1a6f2bab92a27e2u}, /* 238 */
    {0xf5b5d7ec8acb58a2u, 0xae10af696774b1dbu}, /* 239 */
    {0x9991a6f3d6bf1765u, 0xacca6da1e0a8ef29u}, /* 240 */
    {0xbff610b0cc6edd3fu, 0x17fd090a58d32af3u}, /* 241 */
    {0xeff394dcff8a948eu, 0xddfc4b4cef07f5b0u}, /* 242 */
    {0x95f83d0a1fb69cd9u, 0x4abdaf101564f98eu}, /* 243 */
    {0xbb764c4ca7a4440fu, 0x9d6d1ad41abe37f1u}, /* 244 */
    {0xea53df5fd18d5513u, 0x84c86189216dc5edu}, /* 245 */
    {0x92746b9be2f8552cu, 0x32fd3cf5b4e49bb4u}, /* 246 */
    {0xb7118682dbb66a77u, 0x3fbc8c33221dc2a1u}, /* 247 */
    {0xe4d5e82392a40515u, 0x0fabaf3feaa5334au}, /* 248 */
    {0x8f05b1163ba6832du, 0x29cb4d87f2a7400eu}, /* 249 */
    {0xb2c71d5bca9023f8u, 0x743e20e9ef511012u}, /* 250 */
    {0xdf78e4b2bd342cf6u, 0x914da9246b255416u}, /* 251 */
    {0x8bab8eefb6409c1au, 0x1ad089b6c2f7548eu}, /* 252 */
    {0xae9672aba3d0c320u, 0xa184ac2473b529b1u}, /* 253 */
    {0xda3c0f568cc4f3e8u, 0xc9e5d72d90a2741eu}, /* 254 */
    {0x8865899617fb1871u, 0x7e2fa67c7a658892u}, /* 255 */
    {0xaa7eebfb9df9de8du, 0xddbb901b98feeab7u}, /* 256 */
    {0xd51ea6fa85785631u, 0x552a74227f3ea565u}, /* 257 */
    {0x8533285c936b35deu, 0xd53a88958f87275fu}, /* 258 */
    {0xa67ff273b8460356u, 0x8a892abaf368f137u}, /* 259 */
    {0xd01fef10a657842cu, 0x2d2b7569b0432d85u}, /* 260 */
    {0x8213f56a67f6b29bu, 0x9c3b29620e29fc73u}, /* 261 */
    {0xa298f2c501f45f42u, 0x8349f3ba91b47b8fu}, /* 262 */
    {0xcb3f2f7642717713u, 0x241c70a936219a73u}, /* 263 */
    {0xfe0efb53d30dd4d7u, 0xed238cd383aa0110u}, /* 264 */
    {0x9ec95d1463e8a506u, 0xf4363804324a40aau}, /* 265 */
    {0xc67bb4597ce2ce48u, 0xb143c6053edcd0d5u}, /* 266 */
    {0xf81aa16fdc1b81dau, 0xdd94b7868e94050au}, /* 267 */
    {0x9b10a4e5e9913128u, 0xca7cf2b4191c8326u}, /* 268 */
    {0xc1d4ce1f63f57d72u, 0xfd1c2f611f63a3f0u}, /* 269 */
    {0xf24a01a73cf2dccfu, 0xbc633b39673c8cecu}, /* 270 */
    {0x976e41088617ca01u, 0xd5be0503e085d813u}, /* 271 */
    {0xbd49d14aa79dbc82u, 0x4b2d8644d8a74e18u}, /* 272 */
    {0xec9c459d51852ba2u, 0xddf8e7d60ed1219eu}, /* 273 */
    {0x93e1ab8252f33b45u, 0xcabb90e5c942b503u}, /* 274 */
    {0xb8da1662e7b00a17u, 0x3d6a751f3b936243u}, /* 275 */
    {0xe7109bfba19c0c9du, 0x0cc512670a783ad4u}, /* 276 */
    {0x906a617d450187e2u, 0x27fb2b80668b24c5u}, /* 277 */
    {0xb484f9dc9641e9dau, 0xb1f9f660802dedf6u}, /* 278 */
    {0xe1a63853bbd26451u, 0x5e7873f8a0396973u}, /* 279 */
    {0x8d07e33455637eb2u, 0xdb0b487b6423e1e8u}, /* 280 */
    {0xb049dc016abc5e5fu, 0x91ce1a9a3d2cda62u}, /* 281 */
    {0xdc5c5301c56b75f7u, 0x7641a140cc7810fbu}, /* 282 */
    {0x89b9b3e11b6329bau, 0xa9e904c87fcb0a9du}, /* 283 */
    {0xac2820d9623bf429u, 0x546345fa9fbdcd44u}, /* 284 */
    {0xd732290fbacaf133u, 0xa97c177947ad4095u}, /* 285 */
    {0x867f59a9d4bed6c0u, 0x49ed8eabcccc485du}, /* 286 */
    {0xa81f301449ee8c70u, 0x5c68f256bfff5a74u}, /* 287 */
    {0xd226fc195c6a2f8cu, 0x73832eec6fff3111u}, /* 288 */
    {0x83585d8fd9c25db7u, 0xc831fd53c5ff7eabu}, /* 289 */
    {0xa42e74f3d032f525u, 0xba3e7ca8b77f5e55u}, /* 290 */
    {0xcd3a1230c43fb26fu, 0x28ce1bd2e55f35ebu}, /* 291 */
    {0x80444b5e7aa7cf85u, 0x7980d163cf5b81b3u}, /* 292 */
    {0xa0555e361951c366u, 0xd7e105bcc332621fu}, /* 293 */
    {0xc86ab5c39fa63440u, 0x8dd9472bf3fefaa7u}, /* 294 */
    {0xfa856334878fc150u, 0xb14f98f6f0feb951u}, /* 295 */
    {0x9c935e00d4b9d8d2u, 0x6ed1bf9a569f33d3u}, /* 296 */
    {0xc3b8358109e84f07u, 0x0a862f80ec4700c8u}, /* 297 */
    {0xf4a642e14c6262c8u, 0xcd27bb612758c0fau}, /* 298 */
    {0x98e7e9cccfbd7dbdu, 0x8038d51cb897789cu}, /* 299 */
    {0xbf21e44003acdd2cu, 0xe0470a63e6bd56c3u}, /* 300 */
    {0xeeea5d5004981478u, 0x1858ccfce06cac74u}, /* 301 */
    {0x95527a5202df0ccbu, 0x0f37801e0c43ebc8u}, /* 302 */
    {0xbaa718e68396cffdu, 0xd30560258f54e6bau}, /* 303 */
    {0xe950df20247c83fdu, 0x47c6b82ef32a2069u}, /* 304 */
    {0x91d28b7416cdd27eu, 0x4cdc331d57fa5441u}, /* 305 */
    {0xb6472e511c81471du, 0xe0133fe4adf8e952u}, /* 306 */
    {0xe3d8f9e563a198e5u, 0x58180fddd97723a6u}, /* 307 */
    {0x8e679c2f5e44ff8fu, 0x570f09eaa7ea7648u}, /* 308 */
};

/* floor(q * log2(5)) for |q| <= 400 (checked over the table range by
   tests/c/check_native.py); the shifted operand is kept non-negative. */
static inline int64_t twn_log2_pow5(int64_t q)
{
    return ((q * 152170 + (INT64_C(1000) << 16)) >> 16) - 1000;
}

/* ------------------------------------------------------------------------ */
/* Bit helpers                                                               */
/* ------------------------------------------------------------------------ */



/* a * b = *hi * 2^64 + return value */
static inline uint64_t twn_mul128(uint64_t a, uint64_t b, uint64_t *hi)
{
#if defined(__SIZEOF_INT128__) && !defined(TWN_NO_INT128)
    __extension__ typedef unsigned __int128 twn_u128;
    twn_u128 r = (twn_u128)a * b;
    *hi = (uint64_t)(r >> 64);
    return (uint64_t)r;
#elif defined(_MSC_VER) && defined(_M_X64)
    return _umul128(a, b, hi);
#elif defined(_MSC_VER) && defined(_M_ARM64)
    *hi = __umulh(a, b);
    return a * b;
#else
    uint64_t al = (uint32_t)a, ah = a >> 32, bl = (uint32_t)b, bh = b >> 32;
    uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
    uint64_t mid = (ll >> 32) + (uint32_t)lh + (uint32_t)hl;
    *hi = hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
    return (mid << 32) | (uint32_t)ll;
#endif
}

static inline double twn_from_bits(uint64_t b)
{
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
}


/* ------------------------------------------------------------------------ */
/* Scanning kernels                                                          */
/* ------------------------------------------------------------------------ */



#ifndef TWN_SSE2
/* High bit of each byte of w equal to c; exact for the lowest such byte
   (a borrow can only mark bytes above a true match). */
static inline uint64_t twn_eq8(uint64_t w, uint8_t c)
{
    uint64_t x = w ^ (TW_ONES * c);
    return (x - TW_ONES) & ~x & TW_HIGH;
}
#endif

/* First '"' or '\\' in [p, e), or e. */
static inline const uint8_t *twn_find_qb(const uint8_t *p, const uint8_t *e)
{
#ifdef TWN_SSE2
    while (e - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
        uint32_t m = (uint32_t)_mm_movemask_epi8(
            _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                         _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))));
        if (m)
            return p + tw_ctz32(m);
        p += 16;
    }
#else
    while (e - p >= 8) {
        uint64_t w = tw_load_le64(p);
        uint64_t m = twn_eq8(w, '"') | twn_eq8(w, '\\');
        if (m)
            return p + tw_ctz64(m) / 8;
        p += 8;
    }
#endif
    while (p < e && *p != '"' && *p != '\\')
        p++;
    return p;
}

/* First '"', '[', ']', '{' or '}' in [p, e), or e. */
static inline const uint8_t *twn_find_struct(const uint8_t *p, const uint8_t *e)
{
#ifdef TWN_SSE2
    while (e - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
        /* only '[' and '{' become '{' with bit 5 set, only ']' and '}' '}' */
        __m128i b = _mm_or_si128(v, _mm_set1_epi8(0x20));
        __m128i m = _mm_or_si128(
            _mm_or_si128(_mm_cmpeq_epi8(b, _mm_set1_epi8('{')),
                         _mm_cmpeq_epi8(b, _mm_set1_epi8('}'))),
            _mm_cmpeq_epi8(v, _mm_set1_epi8('"')));
        uint32_t k = (uint32_t)_mm_movemask_epi8(m);
        if (k)
            return p + tw_ctz32(k);
        p += 16;
    }
#else
    while (e - p >= 8) {
        uint64_t w = tw_load_le64(p);
        uint64_t m = twn_eq8(w, '"') | twn_eq8(w, '[') | twn_eq8(w, ']') |
                     twn_eq8(w, '{') | twn_eq8(w, '}');
        if (m)
            return p + tw_ctz64(m) / 8;
        p += 8;
    }
#endif
    while (p < e && *p != '"' && *p != '[' && *p != ']' && *p != '{' && *p != '}')
        p++;
    return p;
}

static inline const uint8_t *twn_ws(const uint8_t *p, const uint8_t *e)
{
    while (p < e && *p <= ' ')
        p++;
    return p;
}

/* p just after an opening quote: the position after the closing quote. */
static const uint8_t *twn_skip_string(const uint8_t *p, const uint8_t *e)
{
    for (;;) {
        p = twn_find_qb(p, e);
        if (p >= e)
            return e;
        if (*p == '"')
            return p + 1;
        p += 2; /* an escape: the escaped byte is never a quote to stop at */
    }
}

/* Generic container skip: p just after an opening bracket, at nesting
   depth `depth`; the position after the bracket closing depth 1.  With
   commas, *commas += the commas at depth 1. */
static const uint8_t *twn_skip_nested(const uint8_t *p, const uint8_t *e, size_t depth,
                                      size_t *commas)
{
    for (;;) {
        const uint8_t *q = twn_find_struct(p, e);
        uint8_t c;
        if (commas && depth == 1)
            for (const uint8_t *r = p; r < q; r++)
                *commas += *r == ',';
        if (q >= e)
            return e;
        c = *q;
        p = q + 1;
        if (c == '"')
            p = twn_skip_string(p, e);
        else if (c == '[' || c == '{')
            depth++;
        else if (--depth == 0)
            return p;
    }
}

#ifdef TWN_SSE2
static inline uint64_t twn_prefix_xor(uint64_t x)
{
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    return x;
}

static inline unsigned twn_popcount64(uint64_t x)
{
#if defined(__GNUC__) || defined(__clang__)
    return (unsigned)__builtin_popcountll(x);
#else
    x = x - ((x >> 1) & UINT64_C(0x5555555555555555));
    x = (x & UINT64_C(0x3333333333333333)) + ((x >> 2) & UINT64_C(0x3333333333333333));
    x = (x + (x >> 4)) & UINT64_C(0x0F0F0F0F0F0F0F0F);
    return (unsigned)((x * UINT64_C(0x0101010101010101)) >> 56);
#endif
}

/* Bytes of [p, p + 64) equal to '"', '\\', an opening bracket, a closing
   bracket, ','. */
static inline void twn_masks64(const uint8_t *p, uint64_t *quote, uint64_t *bs,
                               uint64_t *open, uint64_t *close, uint64_t *comma)
{
    uint64_t mq = 0, mb = 0, mo = 0, mc = 0, mm = 0;
    for (int i = 0; i < 4; i++) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * i));
        /* only '[' and '{' become '{' with bit 5 set, only ']' and '}' '}' */
        __m128i b = _mm_or_si128(v, _mm_set1_epi8(0x20));
        unsigned sh = 16u * (unsigned)i;
        mq |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8('"'))) << sh;
        mb |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))) << sh;
        mo |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(b, _mm_set1_epi8('{'))) << sh;
        mc |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(b, _mm_set1_epi8('}'))) << sh;
        mm |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(','))) << sh;
    }
    *quote = mq;
    *bs = mb;
    *open = mo;
    *close = mc;
    *comma = mm;
}
#endif

/* p just after the opening bracket of a container: the position after its
   closing bracket.  With commas, *commas += the commas directly inside it.
   64 bytes per step: string interiors are masked out with a prefix XOR of
   the unescaped quotes, then the brackets are walked. */
static const uint8_t *twn_skip_container(const uint8_t *p, const uint8_t *e,
                                         size_t *commas)
{
    size_t depth = 1;
#ifdef TWN_SSE2
    uint64_t in_str = 0; /* all ones: the previous block ended in a string */
    uint64_t esc = 0;    /* 1: the first byte of this block is escaped */
    while (e - p >= 64) {
        uint64_t quote, bs, open, close, comma, str;
        twn_masks64(p, &quote, &bs, &open, &close, &comma);
        if (TWN_UNLIKELY(bs | esc)) {
            /* a backslash escapes the next byte unless itself escaped */
            uint64_t escaped = esc, b = bs & ~esc;
            esc = 0;
            while (b) {
                unsigned i = tw_ctz64(b);
                if (i == 63) {
                    esc = 1;
                    break;
                }
                escaped |= UINT64_C(1) << (i + 1);
                b &= ~(UINT64_C(3) << i);
            }
            quote &= ~escaped;
        }
        str = twn_prefix_xor(quote) ^ in_str;
        in_str = (uint64_t)0 - (str >> 63);
        open &= ~str;
        close &= ~str;
        if (!commas && twn_popcount64(close) < depth) {
            /* depth cannot reach 0 in this block */
            depth += twn_popcount64(open);
            depth -= twn_popcount64(close);
        } else {
            uint64_t br = open | close, seen = 0;
            comma &= ~str;
            while (br) {
                unsigned i = tw_ctz64(br);
                uint64_t upto = (UINT64_C(1) << i) - 1; /* bits below i */
                if (commas && depth == 1)
                    *commas += twn_popcount64(comma & upto & ~seen);
                seen = upto | (UINT64_C(1) << i);
                if ((open >> i) & 1u) {
                    depth++;
                } else if (--depth == 0) {
                    return p + i + 1;
                }
                br &= br - 1;
            }
            if (commas && depth == 1)
                *commas += twn_popcount64(comma & ~seen);
        }
        p += 64;
    }
    if (in_str) {
        p += esc; /* esc implies in_str: backslashes only occur in strings */
        p = twn_skip_string(p, e);
    }
#endif
    return twn_skip_nested(p, e, depth, commas);
}

/* p at the first byte of a (valid) value: the position just after it. */
static const uint8_t *twn_skip_value(const uint8_t *p, const uint8_t *e)
{
    uint8_t c = *p;
    if (c == '"')
        return twn_skip_string(p + 1, e);
    if (c == '[' || c == '{') {
        /* flat containers (int arrays like "bytes") end at the first
           structural byte */
        const uint8_t *q = twn_find_struct(p + 1, e);
        if (q < e && (*q == ']' || *q == '}'))
            return q + 1;
        return twn_skip_container(p + 1, e, NULL);
    }
    /* number or literal */
    while (p < e && *p > ' ' && *p != ',' && *p != ']' && *p != '}')
        p++;
    return p;
}

/* ------------------------------------------------------------------------ */
/* Escapes                                                                   */
/* ------------------------------------------------------------------------ */



/* Next character of a validated string body ending at se: its code point,
   0x80 for any raw non-ASCII byte (callers only compare against ASCII), and
   *sp advanced. */
static inline uint32_t twn_next_char(const uint8_t **sp, const uint8_t *se)
{
    const uint8_t *s = *sp;
    uint32_t cp;
    if (*s != '\\') {
        *sp = s + 1;
        return *s < 0x80 ? *s : 0x80;
    }
    if (se - s < 2) { /* cannot happen in a validated string */
        *sp = se;
        return 0x80;
    }
    switch (s[1]) {
    case 'b': cp = '\b'; break;
    case 'f': cp = '\f'; break;
    case 'n': cp = '\n'; break;
    case 'r': cp = '\r'; break;
    case 't': cp = '\t'; break;
    case 'u':
        if (se - s < 6) {
            *sp = se;
            return 0x80;
        }
        cp = (uint32_t)tw_hex4(s + 2); /* validated: never -1 */
        *sp = s + 6; /* a following low surrogate decodes as >= 0x80 too */
        return cp;
    default: cp = s[1]; break; /* " \ / */
    }
    *sp = s + 2;
    return cp;
}

/* ------------------------------------------------------------------------ */
/* Numbers                                                                   */
/* ------------------------------------------------------------------------ */

static const double TWN_POW10[23] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

#define TWN_SIGN UINT64_C(0x8000000000000000)
#define TWN_INF UINT64_C(0x7FF0000000000000)
#define TWN_HIDDEN (UINT64_C(1) << 52)

/* Bits of the non-negative double m * 2^g: m < 2^53, and m >= 2^52 unless
   g == -1074 (subnormal or zero); +inf when too large. */
static inline uint64_t twn_pack(uint64_t m, int64_t g)
{
    int64_t biased;
    if (m < TWN_HIDDEN)
        return m;
    biased = g + 1075;
    if (biased >= 2047)
        return TWN_INF;
    return ((uint64_t)biased << 52) | (m - TWN_HIDDEN);
}

/*
 * w * 10^q (w != 0, TWN_QMIN <= q <= TWN_QMAX) split at the rounding
 * position of its double: the value is (mant + f) * 2^g with f in [0, 1),
 * round = the first bit of f, and the rest of f below it is zero (rzero) or
 * has all its bits down to the product's bit 64 set (rfull, where the
 * product's error could carry).  exact: 5^q was exact, the split is exact.
 */
typedef struct {
    uint64_t mant;
    int64_t g;
    int round, rzero, rfull, exact;
} twn_split;

static inline void twn_split_at(uint64_t w, int64_t q, twn_split *s)
{
    const uint64_t *t = TWN_POW5[q - TWN_QMIN];
    unsigned lz = tw_clz64(w);
    uint64_t a1, a0, b1, b0, lo, mid, hi, restmask;
    int64_t e2, g, d;
    int top;
    w <<= lz;
    a0 = twn_mul128(w, t[0], &a1);
    b0 = twn_mul128(w, t[1], &b1);
    lo = b0;
    mid = a0 + b1;
    hi = a1 + (mid < a0);
    top = (hi >> 63) ? 191 : 190; /* leading bit of the 192-bit product */
    e2 = twn_log2_pow5(q) - 127 + q - (int64_t)lz; /* exponent of its bit 0 */
    g = top + e2 - 52;
    if (g < -1074)
        g = -1074;
    d = g - e2; /* product bits below the double's last place: >= 138 */
    s->g = g;
    s->exact = q >= 0 && q <= 55;
    if (d > 192) {
        s->mant = 0;
        s->round = 0;
        s->rzero = 0;
        s->rfull = 0;
        return;
    }
    if (d == 192) {
        s->mant = 0;
        s->round = (int)(hi >> 63);
        restmask = ~UINT64_C(0) >> 1;
    } else {
        unsigned sh = (unsigned)(d - 128); /* 10..63 */
        s->mant = hi >> sh;
        s->round = (int)((hi >> (sh - 1)) & 1u);
        restmask = (UINT64_C(1) << (sh - 1)) - 1;
    }
    s->rzero = (hi & restmask) == 0 && mid == 0 && lo == 0;
    s->rfull = (hi & restmask) == restmask && mid == ~UINT64_C(0);
}

/* Correctly rounded w * 10^q (w != 0, q in the table range) as bits, or 0
   when the product cannot decide (then *bits is untouched). */
static inline int twn_round(uint64_t w, int64_t q, uint64_t *bits)
{
    twn_split s;
    uint64_t m;
    int up;
    twn_split_at(w, q, &s);
    if (!s.exact && s.rfull)
        return 0;
    /* inexact: the true remainder is strictly positive, so no ties */
    up = s.round && (!s.exact || !s.rzero || (s.mant & 1u));
    m = s.mant + (uint64_t)up;
    if (m >> 53) {
        m >>= 1;
        s.g++;
    }
    *bits = twn_pack(m, s.g);
    return 1;
}

/* --- exact comparison (slow path) --------------------------------------- */

#define TWN_BN_LIMBS 176 /* 5632 bits; the comparisons need < 2800 */
#define TWN_MAX_DIGITS 800 /* more significant digits: 800 + a sticky 1 */

typedef struct {
    uint32_t d[TWN_BN_LIMBS];
    int n;
} twn_bn;

static void twn_bn_mul_add(twn_bn *a, uint32_t m, uint32_t add)
{
    uint64_t c = add;
    for (int i = 0; i < a->n; i++) {
        c += (uint64_t)a->d[i] * m;
        a->d[i] = (uint32_t)c;
        c >>= 32;
    }
    if (c && a->n < TWN_BN_LIMBS)
        a->d[a->n++] = (uint32_t)c;
}

static const uint64_t TWN_POW5_U64[28] = {
    UINT64_C(1),
    UINT64_C(5),
    UINT64_C(25),
    UINT64_C(125),
    UINT64_C(625),
    UINT64_C(3125),
    UINT64_C(15625),
    UINT64_C(78125),
    UINT64_C(390625),
    UINT64_C(1953125),
    UINT64_C(9765625),
    UINT64_C(48828125),
    UINT64_C(244140625),
    UINT64_C(1220703125),
    UINT64_C(6103515625),
    UINT64_C(30517578125),
    UINT64_C(152587890625),
    UINT64_C(762939453125),
    UINT64_C(3814697265625),
    UINT64_C(19073486328125),
    UINT64_C(95367431640625),
    UINT64_C(476837158203125),
    UINT64_C(2384185791015625),
    UINT64_C(11920928955078125),
    UINT64_C(59604644775390625),
    UINT64_C(298023223876953125),
    UINT64_C(1490116119384765625),
    UINT64_C(7450580596923828125)};

static void twn_bn_mul_pow5(twn_bn *a, int64_t k)
{
    /* 5^13 is the largest power of 5 that fits the 32-bit multiplier */
    while (k >= 13) {
        twn_bn_mul_add(a, (uint32_t)TWN_POW5_U64[13], 0);
        k -= 13;
    }
    if (k > 0)
        twn_bn_mul_add(a, (uint32_t)TWN_POW5_U64[k], 0);
}

static void twn_bn_shl(twn_bn *a, int64_t bits)
{
    int64_t limbs = bits / 32;
    unsigned sh = (unsigned)(bits % 32);
    int n = a->n;
    if (n == 0 || bits <= 0)
        return;
    if (n + limbs + 1 > TWN_BN_LIMBS) /* never for the comparisons made */
        limbs = TWN_BN_LIMBS - 1 - n;
    if (sh) {
        uint32_t carry = a->d[n - 1] >> (32 - sh);
        for (int i = n - 1; i > 0; i--)
            a->d[i] = (a->d[i] << sh) | (a->d[i - 1] >> (32 - sh));
        a->d[0] <<= sh;
        if (carry)
            a->d[n++] = carry;
    }
    if (limbs > 0) {
        memmove(a->d + limbs, a->d, (size_t)n * sizeof(uint32_t));
        memset(a->d, 0, (size_t)limbs * sizeof(uint32_t));
        n += (int)limbs;
    }
    a->n = n;
}

static int twn_bn_cmp(const twn_bn *a, const twn_bn *b)
{
    if (a->n != b->n)
        return a->n < b->n ? -1 : 1;
    for (int i = a->n - 1; i >= 0; i--)
        if (a->d[i] != b->d[i])
            return a->d[i] < b->d[i] ? -1 : 1;
    return 0;
}

static void twn_bn_set(twn_bn *a, uint64_t x)
{
    a->n = 0;
    while (x) {
        a->d[a->n++] = (uint32_t)x;
        x >>= 32;
    }
}

/* sign of D * 10^q - (2m + 1) * 2^(g - 1) */
static int twn_cmp_half(const twn_bn *D, int64_t q, uint64_t m, int64_t g)
{
    twn_bn a, b;
    int64_t ea = q, eb = g - 1;
    memcpy(&a, D, sizeof a);
    twn_bn_set(&b, 2 * m + 1);
    if (q >= 0)
        twn_bn_mul_pow5(&a, q);
    else
        twn_bn_mul_pow5(&b, -q);
    if (ea > eb)
        twn_bn_shl(&a, ea - eb);
    else
        twn_bn_shl(&b, eb - ea);
    return twn_bn_cmp(&a, &b);
}

/* Bits of the magnitude int(digits of [ip, ie) then [fp, fe)) * 10^q0. */
static uint64_t twn_slow(const uint8_t *ip, const uint8_t *ie,
                         const uint8_t *fp, const uint8_t *fe, int64_t q0)
{
    uint8_t dg[TWN_MAX_DIGITS + 1];
    const uint8_t *s = ip, *se = ie;
    int nd = 0, part = 0, sticky = 0, k;
    int64_t dropped = 0, q, e10;
    uint64_t w = 0, m;
    twn_split sp;
    twn_bn D;

    for (;;) {
        unsigned dd;
        if (s == se) {
            if (part)
                break;
            part = 1;
            s = fp;
            se = fe;
            continue;
        }
        dd = (unsigned)(*s++ - '0');
        if (nd == 0 && dd == 0)
            continue;
        if (nd < TWN_MAX_DIGITS)
            dg[nd++] = (uint8_t)dd;
        else {
            dropped++;
            sticky |= dd != 0;
        }
    }
    if (nd == 0)
        return 0;
    q = q0 + dropped;
    if (sticky) {
        dg[nd++] = 1;
        q--;
    }
    while (nd > 1 && dg[nd - 1] == 0) {
        nd--;
        q++;
    }
    e10 = q + nd - 1; /* the value is in [10^e10, 10^(e10+1)) */
    if (e10 < -325)
        return 0; /* < 10^-324 < 2^-1075 */
    if (e10 > 308)
        return TWN_INF;
    /* floor candidate from the first 19 digits (never above the value) */
    k = nd < 19 ? nd : 19;
    for (int i = 0; i < k; i++)
        w = w * 10 + dg[i];
    twn_split_at(w, q + (nd - k), &sp);
    m = sp.mant;
    D.n = 0;
    for (int i = 0; i < nd;) {
        uint32_t chunk = 0, scale = 1;
        for (int j = 0; j < 9 && i < nd; j++, i++) {
            chunk = chunk * 10 + dg[i];
            scale *= 10;
        }
        if (D.n == 0)
            twn_bn_set(&D, chunk);
        else
            twn_bn_mul_add(&D, scale, chunk);
    }
    for (int iter = 0; iter < 8; iter++) {
        int c = twn_cmp_half(&D, q, m, sp.g);
        if (c < 0 || (c == 0 && !(m & 1u)))
            break;
        m++;
        if (m >> 53) {
            m >>= 1;
            sp.g++;
        }
    }
    return twn_pack(m, sp.g);
}

/* --- digits ---------------------------------------------------------------- */

/* Value of the 8 ASCII digits at p (most significant first). */
static inline uint64_t twn_eight(const uint8_t *p)
{
    return tw_swar_digits8(tw_load_le64(p) - TW_ONES * '0');
}

static const uint64_t TWN_POW10_U64[20] = {
    UINT64_C(1), UINT64_C(10), UINT64_C(100), UINT64_C(1000), UINT64_C(10000),
    UINT64_C(100000), UINT64_C(1000000), UINT64_C(10000000), UINT64_C(100000000),
    UINT64_C(1000000000), UINT64_C(10000000000), UINT64_C(100000000000),
    UINT64_C(1000000000000), UINT64_C(10000000000000), UINT64_C(100000000000000),
    UINT64_C(1000000000000000), UINT64_C(10000000000000000),
    UINT64_C(100000000000000000), UINT64_C(1000000000000000000),
    UINT64_C(10000000000000000000)};


/* Value of the 1..8 ASCII digits at p when 8 bytes can be read there: the
   digits are moved to the top of the word and '0's put below them. */
static inline uint64_t twn_short_digits(const uint8_t *p, size_t len)
{
    uint64_t v = (tw_load_le64(p) << (8 * (8 - len))) | (((TW_ONES * '0') >> (8 * len - 1)) >> 1);
    return tw_swar_digits8(v - TW_ONES * '0');
}

/* w * 10^len + value of the digits [p, p + len) (caller bounds the digit
   count to 19); bytes up to e may be read. */
static inline uint64_t twn_accum(uint64_t w, const uint8_t *p, size_t len, const uint8_t *e)
{
    while (len >= 8) {
        w = w * 100000000u + twn_eight(p);
        p += 8;
        len -= 8;
    }
    if (len) {
        if (e - p >= 8)
            return w * TWN_POW10_U64[len] + twn_short_digits(p, len);
        while (len--)
            w = w * 10 + (uint64_t)(*p++ - '0');
    }
    return w;
}

/* Bits of u * 2^q, correctly rounded (u != 0, no overflow or underflow). */
static uint64_t twn_scale2(uint64_t u, int64_t q)
{
    unsigned bl = 64u - tw_clz64(u);
    uint64_t m;
    if (bl <= 53) { /* exact: m in [2^52, 2^53) */
        m = u << (53 - bl);
        q -= 53 - bl;
    } else {
        unsigned sh = bl - 53;
        uint64_t rem = u & ((UINT64_C(1) << sh) - 1), half = UINT64_C(1) << (sh - 1);
        m = u >> sh;
        q += sh;
        if (rem > half || (rem == half && (m & 1u)))
            m++;
        if (m >> 53) {
            m >>= 1;
            q++;
        }
    }
    return twn_pack(m, q);
}

/* Magnitude bits of int(digits of [ip, ie) then [fp, fe)) * 10^q0; bytes up
   to e may be read. */
static uint64_t twn_decimal(const uint8_t *ip, const uint8_t *ie,
                            const uint8_t *fp, const uint8_t *fe, int64_t q0,
                            const uint8_t *e)
{
    size_t ni = (size_t)(ie - ip), nf = (size_t)(fe - fp);
    uint64_t w, bits, bits2;
    int64_t q = q0;
    int trunc = 0;
    if (TWN_LIKELY(ni + nf <= 19)) {
        w = twn_accum(twn_accum(0, ip, ni, e), fp, nf, e);
    } else {
        /* significant digits: skip leading zeros ("0" then fraction zeros) */
        const uint8_t *s = ip, *se = ie, *t = fp;
        size_t ns, take, i;
        while (s < se && *s == '0')
            s++;
        if (s == se)
            while (t < fe && *t == '0')
                t++;
        ns = (size_t)(se - s) + (size_t)(fe - t);
        take = ns < 19 ? ns : 19;
        w = 0;
        for (i = 0; i < take; i++) {
            const uint8_t *c = s < se ? s++ : t++;
            w = w * 10 + (uint64_t)(*c - '0');
        }
        for (; i < ns && !trunc; i++) {
            const uint8_t *c = s < se ? s++ : t++;
            trunc = *c != '0';
        }
        q += (int64_t)(ns - take);
    }
    if (w == 0)
        return 0;
    if (q < TWN_QMIN)
        return 0; /* < 10^20 * 10^-344 < 2^-1075 */
    if (q > TWN_QMAX)
        return TWN_INF;
    if (TWN_LIKELY(twn_round(w, q, &bits))) {
        if (!trunc)
            return bits;
        /* the value is strictly between w and w + 1 (times 10^q) */
        if (twn_round(w + 1, q, &bits2) && bits2 == bits)
            return bits;
    } else if (!trunc) {
        /* the product cannot decide: mostly values that are doubles or
           halfway between two, which for q < 0 means 5^-q divides w */
        if (w <= (UINT64_C(1) << 53) && q >= -22 && q <= 22) {
            double d = (double)w;
            d = q < 0 ? d / TWN_POW10[-q] : d * TWN_POW10[q];
            memcpy(&bits, &d, sizeof bits);
            return bits;
        }
        if (q < 0 && q >= -27 && w % TWN_POW5_U64[-q] == 0)
            return twn_scale2(w / TWN_POW5_U64[-q], q);
    }
    return twn_slow(ip, ie, fp, fe, q0);
}

#define TWN_EXP_CAP INT64_C(100000000000) /* |exponent| saturates here */

/* p at a valid number (its end is before e): the position after it, with
   *out its value and *is_int set when it is an integer literal. */
static const uint8_t *twn_number(const uint8_t *p, const uint8_t *e, double *out,
                                 int *is_int)
{
    const uint8_t *ip, *ie, *fp, *fe;
    int neg = 0, integer = 1;
    int64_t ex = 0;
    uint64_t bits;
    if (*p == '-') {
        neg = 1;
        p++;
    }
#ifdef TWN_SSE2
    /* The usual shape, without loops: at most 8 integer digits, an optional
       fraction, no exponent, at most 19 digits in all, found with one pass
       over 32 bytes (the end of the number is on the critical path of the
       whole walk, its value is not). */
    if (TWN_LIKELY(e - p >= 48)) {
        const __m128i lo = _mm_set1_epi8('0'), hi = _mm_set1_epi8('9');
        const __m128i dot = _mm_set1_epi8('.'), ee = _mm_set1_epi8('e');
        const __m128i bit5 = _mm_set1_epi8(0x20);
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)p);
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(p + 16));
        uint64_t nd = (uint64_t)(uint32_t)_mm_movemask_epi8(
                          _mm_or_si128(_mm_cmplt_epi8(a, lo), _mm_cmpgt_epi8(a, hi))) |
                      ((uint64_t)(uint32_t)_mm_movemask_epi8(
                           _mm_or_si128(_mm_cmplt_epi8(b, lo), _mm_cmpgt_epi8(b, hi)))
                       << 16) |
                      (UINT64_C(1) << 32);
        uint32_t dots = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(a, dot)) |
                        ((uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(b, dot)) << 16);
        uint32_t exps =
            (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_or_si128(a, bit5), ee)) |
            ((uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_or_si128(b, bit5), ee)) << 16);
        unsigned ni = tw_ctz64(nd), nf = 0, end = ni;
        if (ni <= 8) {
            uint64_t w = twn_short_digits(p, ni);
            if ((dots >> ni) & 1u) {
                const uint8_t *f = p + ni + 1;
                unsigned left;
                nf = tw_ctz64(nd >> (ni + 1));
                end = ni + 1 + nf;
                if (end >= 32 || ni + nf > 19)
                    goto general;
                left = nf;
                if (left > 8) {
                    w = w * 100000000u + twn_eight(f);
                    f += 8;
                    left -= 8;
                }
                if (left > 8) {
                    w = w * 100000000u + twn_eight(f);
                    f += 8;
                    left -= 8;
                }
                w = w * TWN_POW10_U64[left] + twn_short_digits(f, left);
                integer = 0;
            }
            if (!((exps >> end) & 1u)) {
                if (w == 0) {
                    bits = 0;
                } else if (!twn_round(w, -(int64_t)nf, &bits)) {
                    integer = 1;
                    goto general;
                }
                if (neg && !(integer && bits == 0))
                    bits |= TWN_SIGN;
                *out = twn_from_bits(bits);
                *is_int = integer;
                return p + end;
            }
            integer = 1;
        }
    }
general:
#endif
    ip = p;
    p = ie = tw_digits(p, e);
    fp = fe = p;
    if (p < e && *p == '.') {
        fp = p + 1;
        p = fe = tw_digits(fp, e);
        integer = 0;
    }
    if (p < e && (*p | 0x20) == 'e') {
        int eneg = 0;
        integer = 0;
        p++;
        if (p < e && (*p == '+' || *p == '-'))
            eneg = *p++ == '-';
        while (p < e && tw_is_digit(*p)) {
            if (ex < TWN_EXP_CAP)
                ex = ex * 10 + (*p - '0');
            p++;
        }
        if (eneg)
            ex = -ex;
    }
    bits = twn_decimal(ip, ie, fp, fe, ex - (int64_t)(fe - fp), e);
    /* an integer literal is a Python int: "-0" is 0 */
    if (neg && !(integer && bits == 0))
        bits |= TWN_SIGN;
    *out = twn_from_bits(bits);
    *is_int = integer;
    return p;
}

size_t tw_native_number(const char *s, size_t len, double *out)
{
    const uint8_t *p = (const uint8_t *)s, *e = p + len, *q;
    int is_int;
    /* grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
    q = p;
    if (q < e && *q == '-')
        q++;
    if (q >= e || !tw_is_digit(*q))
        return 0;
    if (*q == '0')
        q++;
    else
        q = tw_digits(q, e);
    if (e - q >= 2 && q[0] == '.' && tw_is_digit(q[1]))
        q = tw_digits(q + 1, e);
    if (q < e && (*q | 0x20) == 'e') {
        const uint8_t *x = q + 1;
        if (x < e && (*x == '+' || *x == '-'))
            x++;
        if (x < e && tw_is_digit(*x))
            q = tw_digits(x, e);
    }
    /* the rest of s may be read (it cannot continue the literal) unless
       it starts with a byte a literal could hold ("01", "1.5.", "1e") */
    if (q < e && (tw_is_digit(*q) || *q == '.' || (*q | 0x20) == 'e' || *q == '+' || *q == '-'))
        e = q;
    p = twn_number(p, e, out, &is_int);
    return (size_t)(p - (const uint8_t *)s);
}

/* ------------------------------------------------------------------------ */
/* Keys and ids                                                              */
/* ------------------------------------------------------------------------ */

enum { TWN_K_OTHER, TWN_K_TOKEN, TWN_K_TOKEN_ID, TWN_K_LOGPROB, TWN_K_TOP, TWN_K_SLP };

static inline int twn_classify(const uint8_t *s, size_t n)
{
    switch (n) {
    case 5:
        return memcmp(s, "token", 5) == 0 ? TWN_K_TOKEN : TWN_K_OTHER;
    case 7:
        return memcmp(s, "logprob", 7) == 0 ? TWN_K_LOGPROB : TWN_K_OTHER;
    case 8:
        return memcmp(s, "token_id", 8) == 0 ? TWN_K_TOKEN_ID : TWN_K_OTHER;
    case 12:
        return memcmp(s, "top_logprobs", 12) == 0 ? TWN_K_TOP : TWN_K_OTHER;
    case 16:
        return memcmp(s, "sampling_logprob", 16) == 0 ? TWN_K_SLP : TWN_K_OTHER;
    default:
        return TWN_K_OTHER;
    }
}

/* p just after the opening quote of a key: the position after its closing
   quote, *kind its class. */
static inline const uint8_t *twn_key(const uint8_t *p, const uint8_t *e, int *kind)
{
    const uint8_t *r, *end;
    uint8_t tmp[17];
    size_t n = 0;
    if (TWN_LIKELY(e - p >= 16)) {
        /* the usual keys with their closing quote, 8 bytes at a time */
        const uint64_t m48 = (UINT64_C(1) << 48) - 1, m40 = (UINT64_C(1) << 40) - 1;
        uint64_t a = tw_load_le64(p);
        if ((a & m48) == (tw_load_le64((const uint8_t *)"token\"\0") & m48)) {
            *kind = TWN_K_TOKEN;
            return p + 6;
        }
        if (a == tw_load_le64((const uint8_t *)"logprob\"")) {
            *kind = TWN_K_LOGPROB;
            return p + 8;
        }
        if ((a & m48) == (tw_load_le64((const uint8_t *)"bytes\"\0") & m48)) {
            *kind = TWN_K_OTHER;
            return p + 6;
        }
        if (a == tw_load_le64((const uint8_t *)"top_logp") &&
            (tw_load_le64(p + 8) & m40) == (tw_load_le64((const uint8_t *)"robs\"\0\0\0") & m40)) {
            *kind = TWN_K_TOP;
            return p + 13;
        }
        if (a == tw_load_le64((const uint8_t *)"token_id") && p[8] == '"') {
            *kind = TWN_K_TOKEN_ID;
            return p + 9;
        }
    }
    r = twn_find_qb(p, e);
    if (TWN_LIKELY(r < e && *r == '"')) {
        *kind = twn_classify(p, (size_t)(r - p));
        return r + 1;
    }
    /* escapes: decode (ASCII only, at most 16 characters can match) */
    end = twn_skip_string(p, e);
    *kind = TWN_K_OTHER;
    if (end <= p)
        return end;
    {
        const uint8_t *s = p, *se = end - 1;
        while (s < se) {
            uint32_t c = twn_next_char(&s, se);
            if (c >= 0x80 || n == sizeof tmp)
                return end;
            tmp[n++] = (uint8_t)c;
        }
    }
    *kind = twn_classify(tmp, n);
    return end;
}

#define TWN_MAX_ID UINT64_C(0xFFFFFFFF)
static const char TWN_TOKEN_PREFIX[] = "token_id:";

/* Id named by the token string body [s, se) without escapes, or -1. */
static inline int64_t twn_token_raw(const uint8_t *s, const uint8_t *se)
{
    uint64_t v = 0;
    if (se - s < 10 || memcmp(s, TWN_TOKEN_PREFIX, 9) != 0)
        return -1;
    for (s += 9; s < se; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (d >= 10u)
            return -1;
        v = v * 10 + d;
        if (v > TWN_MAX_ID)
            break;
    }
    for (; s < se; s++) /* too large: still all digits? either way no id */
        if (!tw_is_digit(*s))
            return -1;
    return v > TWN_MAX_ID ? -1 : (int64_t)v;
}

/* Same with escapes decoded. */
static int64_t twn_token_escaped(const uint8_t *s, const uint8_t *se)
{
    uint64_t v = 0;
    size_t i = 0;
    while (s < se) {
        uint32_t c = twn_next_char(&s, se);
        if (i < 9) {
            if (c != (uint8_t)TWN_TOKEN_PREFIX[i])
                return -1;
        } else {
            if (c - '0' >= 10u)
                return -1;
            if (v <= TWN_MAX_ID)
                v = v * 10 + (c - '0');
        }
        i++;
    }
    return i < 10 || v > TWN_MAX_ID ? -1 : (int64_t)v;
}

/* p just after the opening quote of a "token" value: the position after
   the closing quote, *id the id it names or -1. */
static inline const uint8_t *twn_token(const uint8_t *p, const uint8_t *e, int64_t *id)
{
    const uint8_t *r, *end;
    if (TWN_LIKELY(e - p >= 24) && tw_load_le64(p) == tw_load_le64((const uint8_t *)"token_id") &&
        p[8] == ':') {
        /* "token_id:" and 1..7 digits then the closing quote */
        uint64_t x = tw_load_le64(p + 9);
        uint64_t nd = tw_nondigit8(x);
        if (nd) {
            unsigned d = tw_ctz64(nd) / 8; /* first non-digit */
            if (d && p[9 + d] == '"') {
                *id = (int64_t)twn_short_digits(p + 9, d);
                return p + 10 + d;
            }
        }
    }
    r = twn_find_qb(p, e);
    if (TWN_LIKELY(r < e && *r == '"')) {
        *id = twn_token_raw(p, r);
        return r + 1;
    }
    end = twn_skip_string(p, e);
    *id = end > p ? twn_token_escaped(p, end - 1) : -1;
    return end;
}

/* p at a "token_id" value: the position after it, *id the id (an integer
   literal in [0, 2^32); "-0" is 0) or -1. */
static inline const uint8_t *twn_token_id(const uint8_t *p, const uint8_t *e, int64_t *id)
{
    const uint8_t *s = p, *d;
    int neg = 0;
    uint64_t v = 0;
    *id = -1;
    if (*s == '-') {
        neg = 1;
        s++;
    }
    if (s >= e || !tw_is_digit(*s))
        return twn_skip_value(p, e);
    d = tw_digits(s, e);
    if (d < e && (*d == '.' || (*d | 0x20) == 'e'))
        return twn_skip_value(p, e); /* a float */
    if (d - s > 10)
        return d;
    for (; s < d; s++)
        v = v * 10 + (uint64_t)(*s - '0');
    if (v <= TWN_MAX_ID && !(neg && v))
        *id = (int64_t)v;
    return d;
}

/* ------------------------------------------------------------------------ */
/* Objects                                                                   */
/* ------------------------------------------------------------------------ */

/* Fields of one entry or candidate object (last occurrence of each key). */
typedef struct {
    int64_t tid, tok; /* id from "token_id" / "token", -1 if not an id */
    double lp, slp;   /* "logprob", "sampling_logprob" */
    uint8_t has_tid, lp_ok;
    uint8_t lp_kind, slp_kind; /* TW_NATIVE_V_* of those values */
} twn_obj;

/* p at a value: its TW_NATIVE_V_* class (a number is read by the caller). */
static inline uint8_t twn_kind(uint8_t c)
{
    switch (c) {
    case 'n': return TW_NATIVE_V_NULL;
    case '"': return TW_NATIVE_V_STRING;
    case 't': case 'f': return TW_NATIVE_V_BOOL;
    case '[': return TW_NATIVE_V_ARRAY;
    case '{': return TW_NATIVE_V_OBJECT;
    default: return TW_NATIVE_V_NUMBER;
    }
}

/* The candidates of one entry: written from k0; code is the entry's
   candidates verdict (TW_NATIVE_MISSING_TOP until an array is read). */
typedef struct {
    size_t k0, k;
    int code;
} twn_top;

typedef struct {
    const uint8_t *e;
    tw_native_cands *c;
    uint64_t *ht; /* duplicate-id table for long candidate lists */
    size_t ht_alloc;
    int nomem;
} twn_ctx;

#define TWN_LINEAR 64 /* candidates per entry checked with the bloom + scan */

static int twn_room(twn_ctx *x, size_t k)
{
    tw_native_cands *c = x->c;
    size_t ncap;
    void *q;
    if (k < c->cap)
        return 1;
    if (!c->grow) {
        x->nomem = 1;
        return 0;
    }
    ncap = c->cap < 1024 ? 1024 : c->cap;
    while (ncap <= k) {
        if (ncap > SIZE_MAX / 2 / sizeof(double)) {
            x->nomem = 1;
            return 0;
        }
        ncap *= 2;
    }
    q = tw_mem_realloc(c->ids, ncap * sizeof(int64_t));
    if (!q) {
        x->nomem = 1;
        return 0;
    }
    c->ids = (int64_t *)q;
    q = tw_mem_realloc(c->lps, ncap * sizeof(double));
    if (!q) {
        x->nomem = 1;
        return 0;
    }
    c->lps = (double *)q;
    c->cap = ncap;
    return 1;
}

static inline uint64_t twn_hash(int64_t id)
{
    return (uint64_t)id * UINT64_C(0x9E3779B97F4A7C15);
}

/* Open-addressing set of the ids k0..k (all distinct) with at least
   4 * (k - k0) slots; returns the slot mask, or 0 when out of memory. */
static size_t twn_ht_build(twn_ctx *x, const int64_t *ids, size_t k0, size_t k)
{
    size_t cnt = k - k0, size = 256, mask;
    unsigned bits = 8;
    while (size < 4 * cnt) {
        if (size > SIZE_MAX / 2 / sizeof(uint64_t)) {
            x->nomem = 1;
            return 0;
        }
        size *= 2;
        bits++;
    }
    if (size > x->ht_alloc) {
        void *q = tw_mem_realloc(x->ht, size * sizeof(uint64_t));
        if (!q) {
            x->nomem = 1;
            return 0;
        }
        x->ht = (uint64_t *)q;
        x->ht_alloc = size;
    }
    memset(x->ht, 0, size * sizeof(uint64_t));
    mask = size - 1;
    for (size_t j = k0; j < k; j++) {
        size_t i = (size_t)(twn_hash(ids[j]) >> (64 - bits));
        while (x->ht[i])
            i = (i + 1) & mask;
        x->ht[i] = (uint64_t)ids[j] + 1;
    }
    return mask;
}

static const uint8_t *twn_object(twn_ctx *x, const uint8_t *p, twn_obj *o, twn_top *top);

/* Duplicate ids within one row of candidates ids[k0..k). */
typedef struct {
    uint64_t bloom[4];
    size_t mask;
    unsigned bits;
} twn_seen_set;

static void twn_seen_init(twn_seen_set *s)
{
    memset(s, 0, sizeof *s);
}

/* Whether id is among x->c->ids[k0..k), remembering it when it is not: a
   bloom filter and a scan up to TWN_LINEAR candidates, a hash table (x->ht,
   rebuilt as the row grows) beyond.  1: seen, 0: new, -1: out of memory. */
static int twn_seen(twn_ctx *x, twn_seen_set *s, size_t k0, size_t k, int64_t id)
{
    size_t cnt = k - k0, i;
    if (cnt < TWN_LINEAR) {
        unsigned h = (unsigned)(twn_hash(id) >> 56);
        uint64_t bit = UINT64_C(1) << (h & 63);
        int dup = 0;
        if (s->bloom[h >> 6] & bit) {
            const int64_t *ids = x->c->ids;
            for (size_t j = k0; j < k; j++)
                if (ids[j] == id) {
                    dup = 1;
                    break;
                }
        }
        s->bloom[h >> 6] |= bit;
        return dup;
    }
    if (!s->mask || 4 * cnt > s->mask + 1) {
        s->mask = twn_ht_build(x, x->c->ids, k0, k);
        if (!s->mask)
            return -1;
        s->bits = 0;
        while ((size_t)1 << s->bits <= s->mask)
            s->bits++;
    }
    i = (size_t)(twn_hash(id) >> (64 - s->bits));
    while (x->ht[i]) {
        if (x->ht[i] == (uint64_t)id + 1)
            return 1;
        i = (i + 1) & s->mask;
    }
    x->ht[i] = (uint64_t)id + 1;
    return 0;
}

/* p at the '[' of a "top_logprobs" value: read it into top (from top->k0). */
static const uint8_t *twn_top_array(twn_ctx *x, const uint8_t *p, twn_top *top)
{
    const uint8_t *e = x->e;
    size_t k = top->k0;
    twn_seen_set seen;
    int code = TW_NATIVE_OK;
    twn_seen_init(&seen);
    p = twn_ws(p + 1, e);
    if (p < e && *p == ']') {
        top->k = k;
        top->code = TW_NATIVE_MISSING_TOP;
        return p + 1;
    }
    while (p < e) {
        if (*p != '{') {
            code = TW_NATIVE_TOP_NOT_OBJECT;
        } else {
            twn_obj o;
            int64_t id;
            p = twn_object(x, p, &o, NULL);
            id = o.has_tid ? o.tid : o.tok;
            if (id < 0) {
                code = TW_NATIVE_TOP_NO_ID;
            } else if (!o.lp_ok || !isfinite(o.lp)) {
                code = TW_NATIVE_TOP_NOT_FINITE;
            } else if (o.lp > 1e-6) {
                code = TW_NATIVE_TOP_POSITIVE;
            } else {
                int dup = twn_seen(x, &seen, top->k0, k, id);
                if (dup < 0)
                    return e;
                if (dup) {
                    code = TW_NATIVE_TOP_DUPLICATE;
                } else {
                    if (!twn_room(x, k))
                        return e;
                    x->c->ids[k] = id;
                    x->c->lps[k] = o.lp;
                    k++;
                }
            }
        }
        if (code != TW_NATIVE_OK) {
            /* the first bad candidate decides: skip the rest of the array
               (p is inside it, at its element or just after one) */
            p = twn_skip_container(p, e, NULL);
            break;
        }
        p = twn_ws(p, e);
        if (p < e && *p == ',') {
            p = twn_ws(p + 1, e);
            continue;
        }
        p = p < e ? p + 1 : e;
        break;
    }
    top->k = k;
    top->code = code;
    return p;
}

/* p at the '{' of an object: read its fields into o (and, with top, its
   "top_logprobs" into top); the position after the '}'. */
static const uint8_t *twn_object(twn_ctx *x, const uint8_t *p, twn_obj *o, twn_top *top)
{
    const uint8_t *e = x->e;
    int is_int;
    o->tid = -1;
    o->tok = -1;
    o->lp = o->slp = 0.0;
    o->has_tid = 0;
    o->lp_ok = 0;
    o->lp_kind = o->slp_kind = TW_NATIVE_V_MISSING;
    p = twn_ws(p + 1, e);
    if (p < e && *p == '}')
        return p + 1;
    while (p < e) {
        int kind;
        p = twn_key(p + 1, e, &kind); /* p was at the key's quote */
        p = twn_ws(p, e);
        p = twn_ws(p + 1, e); /* ':' */
        if (p >= e)
            return e;
        switch (kind) {
        case TWN_K_LOGPROB:
            o->lp_kind = twn_kind(*p);
            if (*p == '-' || tw_is_digit(*p)) {
                p = twn_number(p, e, &o->lp, &is_int);
                o->lp_ok = 1;
            } else {
                o->lp_ok = 0;
                p = twn_skip_value(p, e);
            }
            break;
        case TWN_K_SLP:
            o->slp_kind = twn_kind(*p);
            if (*p == '-' || tw_is_digit(*p))
                p = twn_number(p, e, &o->slp, &is_int);
            else
                p = twn_skip_value(p, e);
            break;
        case TWN_K_TOKEN:
            if (*p == '"') {
                p = twn_token(p + 1, e, &o->tok);
            } else {
                o->tok = -1;
                p = twn_skip_value(p, e);
            }
            break;
        case TWN_K_TOKEN_ID:
            o->has_tid = 1;
            p = twn_token_id(p, e, &o->tid);
            break;
        case TWN_K_TOP:
            if (top && *p == '[') {
                p = twn_top_array(x, p, top);
                if (x->nomem)
                    return e;
                break;
            }
            if (top) {
                top->k = top->k0;
                top->code = TW_NATIVE_MISSING_TOP;
            }
            p = twn_skip_value(p, e);
            break;
        default:
            p = twn_skip_value(p, e);
            break;
        }
        p = twn_ws(p, e);
        if (p < e && *p == ',') {
            p = twn_ws(p + 1, e);
            continue;
        }
        return p < e ? p + 1 : e;
    }
    return e;
}

/* ------------------------------------------------------------------------ */
/* Public API                                                                */
/* ------------------------------------------------------------------------ */

void tw_native_cands_free(tw_native_cands *c)
{
    tw_mem_free(c->ids);
    tw_mem_free(c->lps);
    c->ids = NULL;
    c->lps = NULL;
    c->cap = 0;
}

static int twn_content_ok(const tw_value *v)
{
    return v && v->present && v->type == TW_T_ARRAY && v->end - v->start >= 2;
}

/* The first element of the recorded array arr (or its ']'), NULL if arr is
   not an array; *e gets the end of its text. */
static const uint8_t *twn_array_begin(const char *buf, const tw_value *arr, const uint8_t **e)
{
    if (!twn_content_ok(arr))
        return NULL;
    *e = (const uint8_t *)buf + arr->end;
    return twn_ws((const uint8_t *)buf + arr->start + 1, *e);
}

/* p just after an element: the next element (or the closing ']'). */
static inline const uint8_t *twn_array_next(const uint8_t *p, const uint8_t *e)
{
    p = twn_ws(p, e);
    if (p < e && *p == ',')
        p = twn_ws(p + 1, e);
    return p;
}

int tw_native_count(const char *buf, const tw_value *content, size_t *total)
{
    const uint8_t *e = NULL, *p = twn_array_begin(buf, content, &e);
    size_t t = 0;
    *total = 0;
    if (!p)
        return TW_NATIVE_BAD_ARG;
    while (p < e && *p != ']') {
        if (*p == '{') {
            /* the room needed: the longest top_logprobs of the entry */
            const uint8_t *q = twn_ws(p + 1, e);
            size_t most = 0;
            if (q < e && *q != '}') {
                while (q < e) {
                    int kind;
                    q = twn_key(q + 1, e, &kind);
                    q = twn_ws(twn_ws(q, e) + 1, e);
                    if (q >= e)
                        break;
                    if (kind == TWN_K_TOP && *q == '[') {
                        const uint8_t *r = twn_ws(q + 1, e);
                        if (r < e && *r == ']') {
                            q = r + 1;
                        } else {
                            size_t commas = 0;
                            q = twn_skip_container(q + 1, e, &commas);
                            if (commas + 1 > most)
                                most = commas + 1;
                        }
                    } else {
                        q = twn_skip_value(q, e);
                    }
                    q = twn_ws(q, e);
                    if (q < e && *q == ',') {
                        q = twn_ws(q + 1, e);
                        continue;
                    }
                    if (q < e)
                        q++;
                    break;
                }
            } else if (q < e) {
                q++;
            }
            p = q;
            t += most;
        } else {
            p = twn_skip_value(p, e);
        }
        p = twn_array_next(p, e);
    }
    *total = t;
    return TW_NATIVE_OK;
}

/* No failure yet, no candidates. */
static void twn_result_init(tw_native_result *res)
{
    res->sampled_err = -1;
    res->sampled_code = TW_NATIVE_OK;
    res->top_err = -1;
    res->top_code = TW_NATIVE_OK;
    res->ncand = 0;
}

int tw_native_parse(const char *buf, const tw_value *content, size_t n,
                    const int64_t *ids, int want_top, double *sampled,
                    int64_t *coff, double *entry_lps, tw_native_cands *cands,
                    tw_native_result *res)
{
    const uint8_t *p, *e;
    twn_ctx x;
    size_t k = 0;
    int s_on = 1, t_on = want_top != 0, rc = TW_NATIVE_OK;

    twn_result_init(res);
    if (!twn_content_ok(content) || content->count != n || (n && (!ids || !sampled)) ||
        (t_on && (!coff || !entry_lps || !cands)))
        return TW_NATIVE_BAD_ARG;
    p = (const uint8_t *)buf + content->start + 1;
    e = (const uint8_t *)buf + content->end;
    memset(&x, 0, sizeof x);
    x.e = e;
    x.c = cands;
    if (t_on)
        coff[0] = 0;

    for (size_t i = 0; i < n && (s_on || t_on); i++) {
        int tcode = TW_NATIVE_OK;
        p = twn_ws(p, e);
        if (p >= e) {
            rc = TW_NATIVE_BAD_ARG;
            break;
        }
        if (*p != '{') {
            if (s_on) {
                res->sampled_err = (ptrdiff_t)i;
                res->sampled_code = TW_NATIVE_ENTRY_NOT_OBJECT;
                s_on = 0;
            }
            tcode = TW_NATIVE_MISSING_TOP;
            p = twn_skip_value(p, e);
        } else {
            twn_obj o;
            twn_top top;
            top.k0 = top.k = k;
            top.code = TW_NATIVE_MISSING_TOP;
            p = twn_object(&x, p, &o, t_on ? &top : NULL);
            if (x.nomem) {
                rc = TW_NATIVE_NOMEM;
                break;
            }
            if (s_on) {
                int64_t id = o.has_tid ? o.tid : o.tok;
                int code = TW_NATIVE_OK;
                if (id < 0 || id != ids[i])
                    code = TW_NATIVE_TOKEN_MISMATCH;
                else if (!o.lp_ok)
                    code = TW_NATIVE_NOT_A_NUMBER;
                else if (!isfinite(o.lp))
                    code = TW_NATIVE_NOT_FINITE;
                else if (o.lp == -9999.0)
                    code = TW_NATIVE_NO_EVIDENCE;
                if (code) {
                    res->sampled_err = (ptrdiff_t)i;
                    res->sampled_code = code;
                    s_on = 0;
                } else {
                    sampled[i] = o.lp;
                }
            }
            if (t_on) {
                if (top.code)
                    tcode = top.code;
                else if (!o.lp_ok)
                    tcode = TW_NATIVE_SAMPLED_NOT_A_NUMBER;
                else {
                    k = top.k;
                    coff[i + 1] = (int64_t)k;
                    entry_lps[i] = o.lp;
                }
            }
        }
        if (t_on && tcode) {
            res->top_err = (ptrdiff_t)i;
            res->top_code = tcode;
            t_on = 0;
            for (size_t j = i + 1; j <= n; j++)
                coff[j] = (int64_t)k;
        }
        p = twn_ws(p, e);
        if (p < e && *p == ',')
            p++;
    }
    tw_mem_free(x.ht);
    if (want_top)
        res->ncand = k;
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Flat arrays of the OpenAI-compatible completions format                   */
/* ------------------------------------------------------------------------ */

ptrdiff_t tw_native_numbers(const char *buf, const tw_value *arr, double *out)
{
    const uint8_t *e = NULL, *p = twn_array_begin(buf, arr, &e);
    size_t i = 0;
    if (!p)
        return 0;
    while (p < e && *p != ']') {
        int is_int;
        if (*p != '-' && !tw_is_digit(*p))
            return (ptrdiff_t)i;
        p = twn_array_next(twn_number(p, e, &out[i++], &is_int), e);
    }
    return -1;
}

size_t tw_native_token_strings(const char *buf, const tw_value *arr, int64_t *ids)
{
    const uint8_t *e = NULL, *p = twn_array_begin(buf, arr, &e);
    size_t i = 0, named = 0;
    if (!p)
        return 0;
    while (p < e && *p != ']') {
        int64_t id = -1;
        if (*p == '"')
            p = twn_token(p + 1, e, &id);
        else
            p = twn_skip_value(p, e);
        ids[i++] = id;
        named += id >= 0;
        p = twn_array_next(p, e);
    }
    return named;
}

ptrdiff_t tw_native_records(const char *buf, const tw_value *content, int64_t *ids,
                            double *lp, uint8_t *lp_kind, double *slp, uint8_t *slp_kind)
{
    const uint8_t *e = NULL, *p = twn_array_begin(buf, content, &e);
    twn_ctx x;
    size_t i = 0;
    if (!p)
        return 0;
    memset(&x, 0, sizeof x);
    x.e = e;
    while (p < e && *p != ']') {
        twn_obj o;
        if (*p != '{')
            return (ptrdiff_t)i;
        p = twn_object(&x, p, &o, NULL);
        ids[i] = o.has_tid ? o.tid : o.tok;
        lp[i] = o.lp;
        lp_kind[i] = o.lp_kind;
        slp[i] = o.slp;
        slp_kind[i] = o.slp_kind;
        i++;
        p = twn_array_next(p, e);
    }
    return -1;
}

ptrdiff_t tw_native_triples(const char *buf, const tw_value *arr, int64_t *ids, double *values,
                            uint8_t *kinds)
{
    const uint8_t *e = NULL, *p = twn_array_begin(buf, arr, &e);
    size_t i = 0;
    if (!p)
        return 0;
    while (p < e && *p != ']') {
        size_t n = 0;
        int is_int;
        if (*p != '[')
            return (ptrdiff_t)i;
        ids[i] = -1;
        values[i] = 0.0;
        kinds[i] = TW_NATIVE_V_MISSING;
        p = twn_ws(p + 1, e);
        while (p < e && *p != ']') {
            if (n == 0) {
                kinds[i] = twn_kind(*p);
                if (kinds[i] == TW_NATIVE_V_NUMBER)
                    p = twn_number(p, e, &values[i], &is_int);
                else
                    p = twn_skip_value(p, e);
            } else if (n == 1) {
                p = twn_token_id(p, e, &ids[i]);
            } else {
                p = twn_skip_value(p, e);
            }
            n++;
            p = twn_array_next(p, e);
        }
        if (n < 2 || n > 3)
            return (ptrdiff_t)i;
        i++;
        p = twn_array_next(p < e ? p + 1 : e, e);
    }
    return -1;
}

/* The candidates x->c[k0..end) of one row, in order: a logprob that is not
   finite (NaN: not a number), one > 1e-6, an id listed before; *code the
   first failure (left as is when none).  -1 when out of memory, else 0. */
static int twn_check_row(twn_ctx *x, size_t k0, size_t end, int *code)
{
    twn_seen_set seen;
    twn_seen_init(&seen);
    for (size_t j = k0; j < end; j++) {
        double lp = x->c->lps[j];
        int dup;
        if (!isfinite(lp)) {
            *code = TW_NATIVE_TOP_NOT_FINITE;
            return 0;
        }
        if (lp > 1e-6) {
            *code = TW_NATIVE_TOP_POSITIVE;
            return 0;
        }
        dup = twn_seen(x, &seen, k0, j, x->c->ids[j]);
        if (dup < 0)
            return -1;
        if (dup) {
            *code = TW_NATIVE_TOP_DUPLICATE;
            return 0;
        }
    }
    return 0;
}

/* p at the '[' of one row of [logprob, token_id(, text)] candidates: append
   them from k (ids, logprobs; NaN for a logprob that is not a number) and
   return the position after the row, *k the new end and *code
   TW_NATIVE_TOP_NO_ID when an element is not such an array or names no id. */
static const uint8_t *twn_triple_row(twn_ctx *x, const uint8_t *p, size_t *k, int *code)
{
    const uint8_t *e = x->e;
    p = twn_ws(p + 1, e);
    while (p < e && *p != ']') {
        size_t n = 0;
        int is_int;
        int64_t id = -1;
        double value = NAN;
        if (*p != '[') {
            *code = TW_NATIVE_TOP_NO_ID;
            return twn_skip_container(p, e, NULL);
        }
        p = twn_ws(p + 1, e);
        while (p < e && *p != ']') {
            if (n == 0 && twn_kind(*p) == TW_NATIVE_V_NUMBER)
                p = twn_number(p, e, &value, &is_int);
            else if (n == 1)
                p = twn_token_id(p, e, &id);
            else
                p = twn_skip_value(p, e);
            n++;
            p = twn_array_next(p, e);
        }
        if (n < 2 || n > 3 || id < 0) {
            *code = TW_NATIVE_TOP_NO_ID;
            return twn_skip_container(p < e ? p + 1 : e, e, NULL);
        }
        if (!twn_room(x, *k))
            return e;
        x->c->ids[*k] = id;
        x->c->lps[*k] = value;
        (*k)++;
        p = twn_array_next(p < e ? p + 1 : e, e);
    }
    return p < e ? p + 1 : e;
}

/* Reads one non-empty row of candidates (p at its opening bracket): appends
   them from *k and returns the position after the row; *code a bad shape. */
typedef const uint8_t *(*twn_row_reader)(twn_ctx *x, const uint8_t *p, size_t *k, int *code);

/* The rows of arr (arr->count == n) read for heads: a row that is not a
   non-empty container opened by `open` is TW_NATIVE_MISSING_TOP, else `read`
   takes its shape whole, then twn_check_row its candidates in order; the
   first failing row ends the pass (res->top_err / top_code; the rows after
   it get no candidates). */
static int twn_head_rows(const char *buf, const tw_value *arr, size_t n, int64_t *coff,
                         tw_native_cands *cands, tw_native_result *res, uint8_t open,
                         twn_row_reader read)
{
    const uint8_t *p, *e;
    const uint8_t close = open == '[' ? ']' : '}';
    twn_ctx x;
    size_t k = 0, i;
    int rc = TW_NATIVE_OK;

    twn_result_init(res);
    if (!twn_content_ok(arr) || arr->count != n || !coff || !cands)
        return TW_NATIVE_BAD_ARG;
    p = (const uint8_t *)buf + arr->start + 1;
    e = (const uint8_t *)buf + arr->end;
    memset(&x, 0, sizeof x);
    x.e = e;
    x.c = cands;
    coff[0] = 0;
    for (i = 0; i < n; i++) {
        int code = TW_NATIVE_OK;
        size_t end = k;
        const uint8_t *q;
        p = twn_ws(p, e);
        if (p >= e) {
            rc = TW_NATIVE_BAD_ARG;
            break;
        }
        q = *p == open ? twn_ws(p + 1, e) : e;
        if (q >= e || *q == close) {
            code = TW_NATIVE_MISSING_TOP;
        } else {
            p = read(&x, p, &end, &code);
            if (x.nomem || (code == TW_NATIVE_OK && twn_check_row(&x, k, end, &code) < 0)) {
                rc = TW_NATIVE_NOMEM;
                break;
            }
        }
        if (code != TW_NATIVE_OK) {
            res->top_err = (ptrdiff_t)i;
            res->top_code = code;
            for (size_t j = i + 1; j <= n; j++)
                coff[j] = (int64_t)k;
            break;
        }
        k = end;
        coff[i + 1] = (int64_t)k;
        p = twn_array_next(p, e);
    }
    tw_mem_free(x.ht);
    res->ncand = k;
    return rc;
}

int tw_native_triple_heads(const char *buf, const tw_value *arr, size_t n, int64_t *coff,
                           tw_native_cands *cands, tw_native_result *res)
{
    return twn_head_rows(buf, arr, n, coff, cands, res, '[', twn_triple_row);
}

/* FNV-1a over a key's bytes. */
static uint64_t twn_key_hash(const uint8_t *s, size_t n)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * UINT64_C(0x100000001b3);
    return h;
}

typedef struct {
    const uint8_t *s;
    size_t n;
} twn_span;

/* Pass 1 of tw_native_keyed_heads over row i (p at its '{'): whether a key
   repeats an earlier key of the row (1, with its span), holds an escape (2),
   or neither (0); -1 when out of memory.  *keys / *slots are scratch that
   grows, freed by the caller. */
static int twn_row_repeats(const uint8_t *p, const uint8_t *e, twn_span **keys, size_t *kcap,
                           uint32_t **slots, size_t *scap, twn_span *rep)
{
    size_t nk = 0;
    p = twn_ws(p + 1, e);
    /* the keys first (the document is valid JSON: key, ':', value, ...) */
    while (p < e && *p == '"') {
        const uint8_t *ks = p + 1, *end = twn_skip_string(ks, e);
        size_t n = (size_t)(end - 1 - ks);
        if (memchr(ks, '\\', n))
            return 2;
        if (nk == *kcap) {
            size_t ncap = *kcap ? 2 * *kcap : 64;
            void *q = tw_mem_realloc(*keys, ncap * sizeof(twn_span));
            if (!q)
                return -1;
            *keys = (twn_span *)q;
            *kcap = ncap;
        }
        (*keys)[nk].s = ks;
        (*keys)[nk].n = n;
        nk++;
        p = twn_ws(end, e);
        p = twn_ws(p + 1, e); /* past ':' */
        p = twn_ws(twn_skip_value(p, e), e);
        if (p < e && *p == ',')
            p = twn_ws(p + 1, e);
    }
    if (nk < 2)
        return 0;
    {
        size_t size = 16, mask;
        while (size < 2 * nk)
            size *= 2;
        if (size > *scap) {
            void *q = tw_mem_realloc(*slots, size * sizeof(uint32_t));
            if (!q)
                return -1;
            *slots = (uint32_t *)q;
            *scap = size;
        }
        memset(*slots, 0, size * sizeof(uint32_t));
        mask = size - 1;
        for (size_t j = 0; j < nk; j++) {
            const twn_span *kj = &(*keys)[j];
            size_t at = (size_t)twn_key_hash(kj->s, kj->n) & mask;
            while ((*slots)[at]) {
                const twn_span *ki = &(*keys)[(*slots)[at] - 1];
                if (ki->n == kj->n && memcmp(ki->s, kj->s, kj->n) == 0) {
                    *rep = *kj;
                    return 1;
                }
                at = (at + 1) & mask;
            }
            (*slots)[at] = (uint32_t)(j + 1);
        }
    }
    return 0;
}

/* One {"token_id:N": logprob, ...} row (p at its '{'): every key's id
   (TW_NATIVE_TOP_NO_ID for one that names none) and logprob (NaN for one
   that is not a number) appended from *k. */
static const uint8_t *twn_keyed_row(twn_ctx *x, const uint8_t *p, size_t *k, int *code)
{
    const uint8_t *e = x->e;
    p = twn_ws(p + 1, e);
    while (p < e && *p == '"') {
        int64_t id = -1;
        double value = NAN;
        int is_int;
        p = twn_ws(twn_token(p + 1, e, &id), e);
        p = twn_ws(p + 1, e); /* past ':' */
        if (twn_kind(*p) == TW_NATIVE_V_NUMBER)
            p = twn_number(p, e, &value, &is_int);
        else
            p = twn_skip_value(p, e);
        if (id < 0)
            *code = TW_NATIVE_TOP_NO_ID;
        if (!twn_room(x, *k))
            return e;
        x->c->ids[*k] = id;
        x->c->lps[*k] = value;
        (*k)++;
        p = twn_ws(p, e);
        if (p < e && *p == ',')
            p = twn_ws(p + 1, e);
    }
    return p < e ? p + 1 : e; /* past '}' */
}

int tw_native_keyed_heads(const char *buf, const tw_value *arr, size_t n, int64_t *coff,
                          tw_native_cands *cands, tw_native_result *res, tw_native_repeat *rep)
{
    const uint8_t *p, *e;
    twn_span *keys = NULL;
    uint32_t *slots = NULL;
    size_t kcap = 0, scap = 0, i;
    int rc = TW_NATIVE_OK;

    twn_result_init(res);
    rep->row = -1;
    rep->start = rep->end = 0;
    rep->escaped = 0;
    if (!twn_content_ok(arr) || arr->count != n || !coff || !cands)
        return TW_NATIVE_BAD_ARG;
    e = (const uint8_t *)buf + arr->end;
    coff[0] = 0;

    /* Pass 1: the first row that repeats a key, before any other rule. */
    p = twn_ws((const uint8_t *)buf + arr->start + 1, e);
    for (i = 0; i < n && p < e; i++) {
        if (*p == '{') {
            twn_span r;
            int got = twn_row_repeats(p, e, &keys, &kcap, &slots, &scap, &r);
            if (got < 0) {
                rc = TW_NATIVE_NOMEM;
                break;
            }
            if (got == 2) {
                rep->escaped = 1;
                break;
            }
            if (got == 1) {
                rep->row = (ptrdiff_t)i;
                rep->start = (size_t)(r.s - (const uint8_t *)buf);
                rep->end = rep->start + r.n;
                break;
            }
        }
        p = twn_array_next(twn_skip_value(p, e), e);
    }
    tw_mem_free(keys);
    tw_mem_free(slots);
    if (rc != TW_NATIVE_OK || rep->escaped || rep->row >= 0) {
        for (size_t j = 1; j <= n; j++)
            coff[j] = 0;
        return rc;
    }

    /* Then each row's keys whole (ids), then its candidates in order. */
    return twn_head_rows(buf, arr, n, coff, cands, res, '{', twn_keyed_row);
}
