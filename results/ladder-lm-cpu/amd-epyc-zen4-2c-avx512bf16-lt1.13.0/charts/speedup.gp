set datafile separator ','
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set title 'Training-time speedup per rung'."\n".'ladder-lm-cpu on amd-epyc-zen4-2c-avx512bf16-lt1.13.0' noenhanced
set ylabel 'speedup vs l08-pretrained (x)' noenhanced
set xlabel 'rung'
set yrange [0:*]
set offsets 0,0,graph 0.12,0
set grid ytics
set xtics rotate by -20 noenhanced nomirror
set key top right noenhanced
set terminal svg size 960,540 dynamic font "sans,12" background "white"
set output 'speedup.svg.part'
plot 'speedup.csv' skip 1 using 2:xtic(1) title 'this machine' lc rgb '#2b6cb0', '' skip 1 using ($00):3:(0):($4-$3) with vectors heads size 0.04,90 lw 1.5 lc rgb '#1a202c' notitle, '' skip 1 using ($00):(valid(4) ? $4 : $2):($2<10 ? sprintf("%.2f",$2) : sprintf("%.1f",$2)) with labels offset 0,0.8 font ",10" notitle, '' skip 1 using ($00):(0):(valid(2) ? "" : "n/a") with labels offset 0,0.8 font ",9" tc rgb "#555555" notitle
set output
set terminal pngcairo size 960,540 font "sans,11"
set output 'speedup.png.part'
plot 'speedup.csv' skip 1 using 2:xtic(1) title 'this machine' lc rgb '#2b6cb0', '' skip 1 using ($00):3:(0):($4-$3) with vectors heads size 0.04,90 lw 1.5 lc rgb '#1a202c' notitle, '' skip 1 using ($00):(valid(4) ? $4 : $2):($2<10 ? sprintf("%.2f",$2) : sprintf("%.1f",$2)) with labels offset 0,0.8 font ",10" notitle, '' skip 1 using ($00):(0):(valid(2) ? "" : "n/a") with labels offset 0,0.8 font ",9" tc rgb "#555555" notitle
set output
