-- fixture: parameter passing, defaults, number formatting and unsupported()
if P.K > 1000 then
    unsupported("K=%d is too large for this fixture", P.K)
end
emitf("K=%d name=%s opt=%d\n", P.K, P.name, param("opt", 7))
emit("neg=", P.neg, " types=", math.type(P.K), ",", type(P.name), "\n")
for k, v in pairs(P) do
    emit(k, "=", v, ";")
end
emit("\n", num(12.0), " ", flt(0.1), " ", flt(2), " ", flt(-1.5e-7), " ", true, "\n")
